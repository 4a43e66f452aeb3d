#include "train/corpus.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>

#include "train/token_file.h"
#include "train/tokenizer.h"
#include "util/error.h"
#include "util/program.h"

namespace fmstack::train {

std::string ReadKjvCorpus() {
  // The whole Bible is 4.4 MB of output in about 0.1 s.
  constexpr double kDeadlineSeconds = 60;
  constexpr size_t kMaxBytes = 16 << 20;
  const ProgramResult r =
      RunProgram({"bible", "-f", "gen1:1-rev22:21"}, kDeadlineSeconds, {}, kMaxBytes);
  const std::string& raw = r.output;
  if (!r.ok || raw.size() < 1000000 || raw.size() >= kMaxBytes) {
    throw Error(fmt::format(
        "the King James text is missing: `bible -f gen1:1-rev22:21` {} with {} bytes of output "
        "(expected 1-16 MB); install the Debian package bible-kjv (scripts/bootstrap.sh does), "
        "or pass --corpus FILE",
        r.how, raw.size()));
  }
  // "Ge1:1 In the beginning ..." -> "In the beginning ..."
  std::string text;
  text.reserve(raw.size());
  size_t pos = 0;
  while (pos < raw.size()) {
    size_t end = raw.find('\n', pos);
    if (end == std::string::npos) end = raw.size();
    const size_t space = raw.find(' ', pos);
    const size_t from = space < end ? space + 1 : pos;
    text.append(raw, from, end - from);
    text.push_back('\n');
    pos = end + 1;
  }
  return text;
}

SplitText SplitHeldOut(const std::string& text, int64_t every) {
  SplitText s;
  int64_t line = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    end = end == std::string::npos ? text.size() : end + 1;
    ((++line % every == 0) ? s.held_out : s.train).append(text, pos, end - pos);
    pos = end;
  }
  return s;
}

double UnigramEntropy(const std::vector<uint16_t>& tokens, int64_t vocab) {
  std::vector<int64_t> counts(vocab, 0);
  for (uint16_t t : tokens) ++counts[t];
  const auto n = static_cast<double>(tokens.size());
  double h = 0;
  for (int64_t c : counts) {
    if (c > 0) h -= static_cast<double>(c) / n * std::log(static_cast<double>(c) / n);
  }
  return h;
}

PrepareReport PrepareData(
    const std::string& corpus, const PrepareOptions& options,
    const std::function<void(const std::string&, int64_t, int64_t)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  std::filesystem::create_directories(options.out_dir, ec);
  if (ec) throw Error(fmt::format("{}: cannot create: {}", options.out_dir, ec.message()));
  const SplitText split = SplitHeldOut(corpus, options.held_out_every);
  if (split.held_out.empty()) {
    throw Error(
        fmt::format("corpus has fewer than {} lines: nothing to hold out", options.held_out_every));
  }
  const BpeTokenizer tok =
      BpeTokenizer::Train(split.train, options.vocab, [&](int64_t d, int64_t t) {
        if (progress) progress("tokenizer", d, t);
      });
  const std::string dir = options.out_dir;
  tok.Save(dir + "/tokenizer.bpe");
  const std::vector<int32_t> train = tok.Encode(split.train);
  const std::vector<int32_t> held_out = tok.Encode(split.held_out);
  WriteTokenFile(dir + "/train.bin", train, tok.vocab_size());
  WriteTokenFile(dir + "/val.bin", held_out, tok.vocab_size());

  PrepareReport r;
  r.train_bytes = static_cast<int64_t>(split.train.size());
  r.held_out_bytes = static_cast<int64_t>(split.held_out.size());
  r.train_tokens = static_cast<int64_t>(train.size());
  r.held_out_tokens = static_cast<int64_t>(held_out.size());
  r.vocab = tok.vocab_size();
  r.unigram_entropy = UnigramEntropy(TokenFile::Load(dir + "/train.bin").tokens, r.vocab);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace fmstack::train
