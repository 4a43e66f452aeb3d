#include "train/tokenizer.h"

#include <fmt/format.h>

#include <fstream>
#include <map>
#include <sstream>

#include "util/error.h"

namespace fmstack::train {
namespace {

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

enum class CharClass { kLetter, kDigit, kSpace, kOther };

CharClass Classify(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80 || c == '\'') {
    return CharClass::kLetter;  // bytes of UTF-8 sequences stay inside words
  }
  if (c >= '0' && c <= '9') return CharClass::kDigit;
  if (c == ' ' || c == '\n' || c == '\t' || c == '\r') return CharClass::kSpace;
  return CharClass::kOther;
}

// A word being merged during training: its current symbols and how often the
// word occurs in the corpus.
struct Word {
  std::vector<int32_t> symbols;
  int64_t count = 0;
};

}  // namespace

std::vector<std::string_view> BpeTokenizer::Split(std::string_view text) {
  std::vector<std::string_view> chunks;
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    // One leading space joins the run after it (" the"), as in GPT-2.
    if (text[i] == ' ' && i + 1 < text.size() &&
        Classify(static_cast<unsigned char>(text[i + 1])) != CharClass::kSpace) {
      ++i;
    }
    const CharClass cls = Classify(static_cast<unsigned char>(text[i]));
    while (i < text.size() && Classify(static_cast<unsigned char>(text[i])) == cls) ++i;
    // A whitespace run leaves its last space to the word after it: "  was"
    // splits as " " + " was", so " was" is one token wherever it appears.
    if (cls == CharClass::kSpace && i < text.size() && i - start >= 2 && text[i - 1] == ' ') --i;
    chunks.push_back(text.substr(start, i - start));
  }
  return chunks;
}

BpeTokenizer::BpeTokenizer(std::vector<std::pair<int32_t, int32_t>> merges)
    : merges_(std::move(merges)) {
  pieces_.reserve(256 + merges_.size());
  for (int b = 0; b < 256; ++b) pieces_.emplace_back(1, static_cast<char>(b));
  for (size_t i = 0; i < merges_.size(); ++i) {
    const auto [a, b] = merges_[i];
    pieces_.push_back(pieces_[a] + pieces_[b]);
    rank_[PairKey(a, b)] = static_cast<int32_t>(i);
  }
}

BpeTokenizer BpeTokenizer::Train(std::string_view text, int64_t vocab_size,
                                 const Progress& progress) {
  if (vocab_size < 256 || vocab_size > 65536) {
    throw Error(fmt::format("BPE vocab_size must be in [256, 65536], got {}", vocab_size));
  }
  std::map<std::string_view, int64_t> counts;  // ordered: word ids are deterministic
  for (std::string_view chunk : Split(text)) ++counts[chunk];
  std::vector<Word> words;
  words.reserve(counts.size());
  for (const auto& [chunk, count] : counts) {
    Word w{{}, count};
    for (unsigned char c : chunk) w.symbols.push_back(c);
    words.push_back(std::move(w));
  }
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;  // pair -> words (may be stale)
  for (size_t id = 0; id < words.size(); ++id) {
    const Word& w = words[id];
    for (size_t j = 0; j + 1 < w.symbols.size(); ++j) {
      const uint64_t key = PairKey(w.symbols[j], w.symbols[j + 1]);
      pair_count[key] += w.count;
      where[key].push_back(static_cast<int32_t>(id));
    }
  }

  std::vector<std::pair<int32_t, int32_t>> merges;
  const int64_t wanted = vocab_size - 256;
  while (static_cast<int64_t>(merges.size()) < wanted) {
    uint64_t best = 0;
    int64_t best_count = 0;
    for (const auto& [key, count] : pair_count) {
      if (count > best_count || (count == best_count && count > 0 && key < best)) {
        best = key, best_count = count;
      }
    }
    if (best_count < 2) break;  // nothing left worth merging: a smaller vocabulary
    const auto a = static_cast<int32_t>(best >> 32), b = static_cast<int32_t>(best & 0xffffffff);
    const auto merged = static_cast<int32_t>(256 + merges.size());
    merges.emplace_back(a, b);

    std::vector<int32_t> ids = std::move(where[best]);
    where.erase(best);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (int32_t id : ids) {
      Word& w = words[id];
      std::vector<int32_t>& s = w.symbols;
      bool touched = false;
      std::vector<int32_t> out;
      out.reserve(s.size());
      for (size_t j = 0; j < s.size(); ++j) {
        if (j + 1 < s.size() && s[j] == a && s[j + 1] == b) {
          out.push_back(merged);
          ++j;
          touched = true;
        } else {
          out.push_back(s[j]);
        }
      }
      if (!touched) continue;
      for (size_t j = 0; j + 1 < s.size(); ++j) pair_count[PairKey(s[j], s[j + 1])] -= w.count;
      for (size_t j = 0; j + 1 < out.size(); ++j) {
        const uint64_t key = PairKey(out[j], out[j + 1]);
        pair_count[key] += w.count;
        if (out[j] == merged || out[j + 1] == merged) where[key].push_back(id);
      }
      s = std::move(out);
    }
    pair_count.erase(best);
    if (progress && (merges.size() % 256 == 0 || static_cast<int64_t>(merges.size()) == wanted)) {
      progress(static_cast<int64_t>(merges.size()), wanted);
    }
  }
  return BpeTokenizer(std::move(merges));
}

std::vector<int32_t> BpeTokenizer::EncodeChunk(std::string_view chunk) const {
  std::vector<int32_t> s(chunk.begin(), chunk.end());
  for (int32_t& x : s) x &= 0xff;
  while (s.size() > 1) {
    // Apply the earliest-learned merge present, everywhere in the chunk.
    int32_t best_rank = -1;
    for (size_t j = 0; j + 1 < s.size(); ++j) {
      auto it = rank_.find(PairKey(s[j], s[j + 1]));
      if (it != rank_.end() && (best_rank < 0 || it->second < best_rank)) best_rank = it->second;
    }
    if (best_rank < 0) break;
    const auto [a, b] = merges_[best_rank];
    std::vector<int32_t> out;
    out.reserve(s.size());
    for (size_t j = 0; j < s.size(); ++j) {
      if (j + 1 < s.size() && s[j] == a && s[j + 1] == b) {
        out.push_back(256 + best_rank);
        ++j;
      } else {
        out.push_back(s[j]);
      }
    }
    s = std::move(out);
  }
  return s;
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text) const {
  std::unordered_map<std::string_view, std::vector<int32_t>> cache;
  std::vector<int32_t> tokens;
  tokens.reserve(text.size() / 3);
  for (std::string_view chunk : Split(text)) {
    auto it = cache.find(chunk);
    if (it == cache.end()) it = cache.emplace(chunk, EncodeChunk(chunk)).first;
    tokens.insert(tokens.end(), it->second.begin(), it->second.end());
  }
  return tokens;
}

std::string BpeTokenizer::Decode(std::span<const int32_t> tokens) const {
  std::string text;
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab_size()) {
      throw Error(
          fmt::format("token {} is outside the tokenizer's vocabulary [0, {})", t, vocab_size()));
    }
    text += pieces_[t];
  }
  return text;
}

void BpeTokenizer::Save(const std::string& path) const {
  std::ostringstream out;
  out << "fmstack-bpe 1\nvocab " << vocab_size() << "\nmerges " << merges_.size() << "\n";
  for (const auto& [a, b] : merges_) out << a << ' ' << b << '\n';
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << out.str();
    if (!f.flush()) throw Error(fmt::format("{}: cannot write the tokenizer", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw Error(fmt::format("{}: cannot rename into place", path));
  }
}

BpeTokenizer BpeTokenizer::Load(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error(fmt::format("{}: cannot open the tokenizer file", path));
  std::string magic;
  int version = 0;
  int64_t vocab = 0, count = 0;
  std::string vocab_word, merges_word;
  if (!(f >> magic >> version) || magic != "fmstack-bpe" || version != 1) {
    throw Error(fmt::format("{}:1: expected \"fmstack-bpe 1\"", path));
  }
  if (!(f >> vocab_word >> vocab) || vocab_word != "vocab") {
    throw Error(fmt::format("{}:2: expected \"vocab <size>\"", path));
  }
  if (!(f >> merges_word >> count) || merges_word != "merges" || count != vocab - 256) {
    throw Error(fmt::format("{}:3: expected \"merges {}\"", path, vocab - 256));
  }
  std::vector<std::pair<int32_t, int32_t>> merges;
  for (int64_t i = 0; i < count; ++i) {
    int64_t a = -1, b = -1;
    const int64_t defined = 256 + i;  // a merge may only use tokens defined before it
    if (!(f >> a >> b) || a < 0 || b < 0 || a >= defined || b >= defined) {
      throw Error(fmt::format("{}:{}: expected two token ids below {} (merge {} of {})", path,
                              4 + i, defined, i + 1, count));
    }
    merges.emplace_back(static_cast<int32_t>(a), static_cast<int32_t>(b));
  }
  return BpeTokenizer(std::move(merges));
}

}  // namespace fmstack::train
