// bench/data: the corpus pipeline's per-document stages on one core, each
// against this machine's limits measured in the same run:
//   - the sequential read of the input (from the page cache: what a stage
//     that only read its bytes would reach);
//   - the MinHash kernel alone (MinHasher::Sign on shingle sets already
//     made): the hash rate the signatures can reach. The end-to-end
//     signature rate (shingling, signing and band keys, over the real
//     documents) must be at least half of it.
// Input: HTML files (default: the Debian Reference, all languages).
//
//   bench_data [--html GLOB] [--rounds N]
#include <fmt/format.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "data/html_text.h"
#include "data/langid.h"
#include "data/minhash.h"
#include "data/normalize.h"
#include "data/quality.h"
#include "data/reader.h"
#include "util/random.h"
#include "util/strict_table.h"
#include "util/xxh3.h"

namespace {

using Clock = std::chrono::steady_clock;
using fmstack::data::HtmlText;

double Seconds(const std::function<void()>& fn, int rounds) {
  std::vector<double> t;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];  // the median
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("bench_data: the corpus pipeline's stages against the machine's limits");
  std::string glob = "/usr/share/debian-reference/*.html";
  int rounds = 3;
  app.add_option("--html", glob, "HTML files to read");
  app.add_option("--rounds", rounds, "timed rounds per measurement (the median is printed)");
  CLI11_PARSE(app, argc, argv);
  namespace data = fmstack::data;

  std::vector<std::string> files = data::ExpandInputs(glob);
  std::vector<std::string> pages;
  double bytes = 0;
  const double read_s = Seconds(
      [&] {
        pages.clear();
        bytes = 0;
        for (const std::string& f : files) {
          pages.push_back(fmstack::ReadTextFile(f));
          bytes += static_cast<double>(pages.back().size());
        }
      },
      rounds);
  const double docs = static_cast<double>(pages.size());
  std::printf("bench_data: %zu HTML files, %.1f MB; median of %d rounds; one thread\n",
              pages.size(), bytes / 1e6, rounds);

  std::vector<std::string> texts(pages.size());
  const double extract_s = Seconds(
      [&] {
        for (size_t i = 0; i < pages.size(); ++i) texts[i] = data::ExtractHtmlText(pages[i]).text;
      },
      rounds);
  double text_bytes = 0;
  for (const std::string& t : texts) text_bytes += static_cast<double>(t.size());
  const double normalize_s = Seconds(
      [&] {
        for (std::string& t : texts) t = data::Normalize(t);
      },
      rounds);
  data::LanguageId id;
  std::vector<std::string> langs(texts.size());
  const double lang_s = Seconds(
      [&] {
        for (size_t i = 0; i < texts.size(); ++i) langs[i] = id.Classify(texts[i]).lang;
      },
      rounds);
  int failed = 0;
  const double quality_s = Seconds(
      [&] {
        failed = 0;
        for (size_t i = 0; i < texts.size(); ++i)
          failed += data::FailedRule(data::QualityOptions{}, texts[i], langs[i]).has_value();
      },
      rounds);
  uint64_t sink = 0;
  const double exact_s = Seconds(
      [&] {
        for (const std::string& t : texts) sink ^= fmstack::Xxh3(t.data(), t.size());
      },
      rounds);
  const data::MinHasher hasher(data::MinHashPreset("swallow"));
  double shingles = 0;
  const double minhash_s = Seconds(
      [&] {
        shingles = 0;
        for (const std::string& t : texts) {
          const std::vector<uint32_t> s = data::Shingles(t, 5);
          shingles += static_cast<double>(s.size());
          sink ^= hasher.BandKeys(hasher.Sign(s))[0];
        }
      },
      rounds);
  // The kernel alone, on shingle sets of the documents' mean size.
  fmstack::Rng rng(1);
  std::vector<uint32_t> set(static_cast<size_t>(shingles / docs));
  for (uint32_t& x : set) x = static_cast<uint32_t>(rng.Next());
  const int reps = std::max(1, static_cast<int>(docs));
  const double kernel_s = Seconds(
      [&] {
        for (int r = 0; r < reps; ++r) sink ^= hasher.Sign(set)[0];
      },
      rounds);
  const double kernel_rate = static_cast<double>(set.size()) * reps / kernel_s;
  const double minhash_rate = shingles / minhash_s;

  std::printf("\n%-22s %10s %10s %12s %s\n", "stage (one core)", "docs/s", "MB/s", "vs limit",
              "limit");
  auto row = [&](const char* name, double s, double mb, double ratio, const char* limit) {
    std::printf("%-22s %10.1f %10.1f %12s %s\n", name, docs / s, mb / 1e6 / s,
                ratio > 0 ? fmt::format("{:.4f}", ratio).c_str() : "", limit);
  };
  row("read (page cache)", read_s, bytes, 1.0, "itself");
  row("extract (gumbo)", extract_s, bytes, read_s / extract_s, "read");
  row("normalize (NFKC)", normalize_s, text_bytes, read_s / normalize_s, "read");
  row("language", lang_s, text_bytes, read_s / lang_s, "read");
  row("quality", quality_s, text_bytes, read_s / quality_s, "read");
  row("exact hash", exact_s, text_bytes, read_s / exact_s, "read");
  row("minhash (20 x 40)", minhash_s, text_bytes, minhash_rate / kernel_rate, "kernel");
  const double total = extract_s + normalize_s + lang_s + quality_s + exact_s + minhash_s;
  row("end to end", total, bytes, read_s / total, "read");
  std::printf(
      "\nMinHash kernel alone: %.2f M shingles/s (800 hashes each: %.2f G hash/s); "
      "end to end %.2f M shingles/s = %.2f of the kernel (target >= 0.5)\n",
      kernel_rate / 1e6, kernel_rate * 800 / 1e9, minhash_rate / 1e6, minhash_rate / kernel_rate);
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  std::printf("quality rules removed %d of %zu; peak memory %.0f MB (all pages and texts held)%s\n",
              failed, pages.size(), static_cast<double>(u.ru_maxrss) / 1024, sink == 42 ? " " : "");
  return minhash_rate / kernel_rate >= 0.5 ? 0 : 1;
}
