#include "data/minhash.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "data/utf8.h"
#include "util/error.h"
#include "util/random.h"
#include "util/xxh3.h"

namespace fmstack::data {

MinHashOptions MinHashPreset(std::string_view name) {
  if (name == "swallow") return {.ngram = 5, .bands = 20, .rows = 40};
  if (name == "fineweb") return {.ngram = 5, .bands = 14, .rows = 8};
  throw Error(fmt::format("minhash preset \"{}\": expected \"swallow\" or \"fineweb\"", name));
}

double CandidateProbability(double jaccard, int bands, int rows) {
  return 1.0 - std::pow(1.0 - std::pow(jaccard, rows), bands);
}

namespace {

uint32_t Fold(uint64_t h) {
  return static_cast<uint32_t>(h ^ (h >> 32));
}

}  // namespace

std::vector<uint32_t> Shingles(std::string_view text, int ngram) {
  // Byte offsets of each code point's start, and the end.
  std::vector<size_t> starts;
  starts.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size();) {
    starts.push_back(i);
    i += std::min(Utf8Length(static_cast<unsigned char>(text[i])), text.size() - i);
  }
  const size_t points = starts.size();
  starts.push_back(text.size());
  std::vector<uint32_t> out;
  if (points == 0) return out;
  const size_t n = std::min<size_t>(static_cast<size_t>(ngram), points);
  out.reserve(points - n + 1);
  for (size_t k = 0; k + n <= points; ++k)
    out.push_back(Fold(Xxh3(text.data() + starts[k], starts[k + n] - starts[k])));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

double Jaccard(std::span<const uint32_t> a, std::span<const uint32_t> b) {
  if (a.empty() && b.empty()) return 1.0;
  size_t i = 0, j = 0, both = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] < b[j]) {
      ++i;
    } else if (b[j] < a[i]) {
      ++j;
    } else {
      ++both, ++i, ++j;
    }
  }
  return static_cast<double>(both) / static_cast<double>(a.size() + b.size() - both);
}

MinHasher::MinHasher(const MinHashOptions& options) : o_(options) {
  if (o_.ngram < 1 || o_.ngram > 64 || o_.bands < 1 || o_.rows < 1 || o_.hashes() > 4096) {
    throw Error(fmt::format(
        "minhash: ngram {} (1..64), bands {} x rows {} (at most 4096 hashes) out of range",
        o_.ngram, o_.bands, o_.rows));
  }
  Rng rng(o_.seed);
  for (int i = 0; i < o_.hashes(); ++i) {
    a_.push_back(rng.Next() | 1);  // odd: a bijection mod 2^64
    b_.push_back(rng.Next());
  }
}

std::vector<uint32_t> MinHasher::SignNaive(std::span<const uint32_t> shingles) const {
  std::vector<uint32_t> sig(a_.size(), 0xffffffffu);
  for (size_t i = 0; i < a_.size(); ++i) {
    for (const uint32_t x : shingles) {
      const auto h = static_cast<uint32_t>((a_[i] * x + b_[i]) >> 32);
      sig[i] = std::min(sig[i], h);
    }
  }
  return sig;
}

std::vector<uint32_t> MinHasher::Sign(std::span<const uint32_t> shingles) const {
  // Blocks of hashes that stay in registers and L1 while every shingle
  // passes: the inner loop over a block vectorizes (vpmuludq on AVX2).
  constexpr size_t kBlock = 64;
  const size_t k = a_.size();
  std::vector<uint32_t> sig(k, 0xffffffffu);
  for (size_t lo = 0; lo < k; lo += kBlock) {
    const size_t n = std::min(kBlock, k - lo);
    alignas(64) uint32_t best[kBlock];
    alignas(64) uint64_t a[kBlock], b[kBlock];
    std::fill(best, best + kBlock, 0xffffffffu);
    std::copy_n(a_.data() + lo, n, a);
    std::copy_n(b_.data() + lo, n, b);
    std::fill(a + n, a + kBlock, 0);
    std::fill(b + n, b + kBlock, ~uint64_t{0});
    for (const uint32_t x : shingles) {
      const uint64_t x64 = x;
      for (size_t i = 0; i < kBlock; ++i) {
        const auto h = static_cast<uint32_t>((a[i] * x64 + b[i]) >> 32);
        best[i] = best[i] < h ? best[i] : h;
      }
    }
    std::copy_n(best, n, sig.data() + lo);
  }
  return sig;
}

std::vector<uint64_t> MinHasher::BandKeys(std::span<const uint32_t> signature) const {
  if (signature.size() != a_.size()) {
    throw Error(
        fmt::format("minhash: a signature of {} values, expected {}", signature.size(), a_.size()));
  }
  std::vector<uint64_t> keys;
  std::vector<uint32_t> buf(static_cast<size_t>(o_.rows) + 1);
  for (int band = 0; band < o_.bands; ++band) {
    buf[0] = static_cast<uint32_t>(band);
    std::copy_n(signature.data() + static_cast<size_t>(band) * static_cast<size_t>(o_.rows),
                o_.rows, buf.data() + 1);
    keys.push_back(Xxh3(std::span<const uint32_t>(buf)));
  }
  return keys;
}

}  // namespace fmstack::data
