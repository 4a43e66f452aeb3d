// train: a byte-level BPE tokenizer (Sennrich et al. 2016; GPT-2's byte-level
// variant): tokens 0..255 are bytes, each later token merges two earlier ones.
// Any byte string round-trips exactly.
//
// File format (text, one record per line):
//   fmstack-bpe 1
//   vocab <V>
//   merges <V - 256>
//   <left> <right>      x (V - 256): line i defines token 256 + i
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fmstack::train {

class BpeTokenizer {
 public:
  // Called every so many merges with (merges done, merges wanted).
  using Progress = std::function<void(int64_t, int64_t)>;

  // Learns vocab_size - 256 merges from `text`. Pairs never merge across
  // pre-token boundaries (words with their leading space, digit runs,
  // punctuation runs, whitespace runs). Ties break toward the smaller pair,
  // so the result is a pure function of the text.
  static BpeTokenizer Train(std::string_view text, int64_t vocab_size,
                            const Progress& progress = {});
  // Throws Error naming the file and line on any malformed record.
  static BpeTokenizer Load(const std::string& path);
  void Save(const std::string& path) const;

  int64_t vocab_size() const { return 256 + static_cast<int64_t>(merges_.size()); }
  std::vector<int32_t> Encode(std::string_view text) const;
  std::string Decode(std::span<const int32_t> tokens) const;
  // The bytes of one token.
  const std::string& Piece(int32_t token) const { return pieces_[token]; }

  // The pre-tokenizer, exposed for tests: the chunks `text` splits into.
  static std::vector<std::string_view> Split(std::string_view text);

 private:
  explicit BpeTokenizer(std::vector<std::pair<int32_t, int32_t>> merges);
  std::vector<int32_t> EncodeChunk(std::string_view chunk) const;

  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::vector<std::string> pieces_;
  std::unordered_map<uint64_t, int32_t> rank_;  // pair key -> merge index
};

}  // namespace fmstack::train
