// train: token shard files and the deterministic batch sampler over them.
//
// Shard format (little-endian):
//   bytes  0..7   magic "FMSTOK01"
//   bytes  8..11  uint32 header size (64)
//   bytes 12..15  uint32 vocab size
//   bytes 16..23  uint64 token count
//   bytes 24..31  uint64 XXH3-64 of the token bytes
//   bytes 32..63  zero
//   then          token count x uint16
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fmstack::train {

struct TokenFile {
  std::string path;
  int64_t vocab = 0;
  std::vector<uint16_t> tokens;

  // Throws Error naming the file and what was expected on a bad magic, a
  // truncated body, a checksum mismatch or a token outside the vocabulary.
  static TokenFile Load(const std::string& path);
};

// The vocabulary a token file was written for, from its header alone (a
// check before anything starts). Throws Error naming the file as Load does
// for a missing file, a bad magic or header.
int64_t TokenFileVocab(const std::string& path);

// Writes atomically (temp file, fsync, rename).
void WriteTokenFile(const std::string& path, std::span<const int32_t> tokens, int64_t vocab);

// Which windows of the token stream make up each micro-batch. Stateless: the
// window for (step, micro, rank, row) is a hash of those and the seed, so a
// resumed run reads exactly what an uninterrupted one would, from any step.
class BatchSampler {
 public:
  BatchSampler(const TokenFile& file, int64_t B, int64_t T, uint64_t seed);

  // inputs and targets are B x T; targets are inputs shifted by one token.
  void Train(int64_t step, int64_t micro, int64_t rank, std::span<int32_t> inputs,
             std::span<int32_t> targets) const;
  // Evaluation batch i of n: fixed, evenly spaced windows over the file.
  void Eval(int64_t i, int64_t n, std::span<int32_t> inputs, std::span<int32_t> targets) const;

 private:
  void Window(int64_t start, int64_t row, std::span<int32_t> inputs,
              std::span<int32_t> targets) const;

  const TokenFile* file_;
  int64_t B_, T_;
  uint64_t seed_;
};

}  // namespace fmstack::train
