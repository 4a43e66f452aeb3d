// Errors with context. Library code throws these (or returns them inside a
// result); only main() turns them into an exit status. Every message says
// where (file:line:column, key, rank ...), what was found and what was expected.
#pragma once

#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace fmstack {

// A place in a text file. line/column are 1-based; 0 means unknown.
struct SourcePos {
  std::string file;
  int line = 0;
  int column = 0;

  // "file:line:column", "file:line" or "file", whichever is known.
  std::string ToString() const;
};

// Base of every fmstack error; what() is the full, human-readable message.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A bad value in a spec or catalog file: names the position, the dotted key,
// the problem, and optionally a hint such as "did you mean 'tp'?".
class SpecError : public Error {
 public:
  SpecError(SourcePos pos, std::string key, std::string problem, std::string hint = {});

  const SourcePos& pos() const { return pos_; }
  const std::string& key() const { return key_; }
  const std::string& problem() const { return problem_; }

 private:
  SourcePos pos_;
  std::string key_;
  std::string problem_;
};

// Edit distance counting neighbour swaps as one edit, for "did you mean".
size_t EditDistance(std::string_view a, std::string_view b);

// The candidate closest to `word` if it is close enough to be a likely typo
// (distance <= max(1, len/3)), else nullopt. Comparison ignores ASCII case.
std::optional<std::string> ClosestMatch(std::string_view word,
                                        std::span<const std::string> candidates);

// " (did you mean 'x'?)" or "" when nothing is close.
std::string DidYouMean(std::string_view word, std::span<const std::string> candidates);
// The did-you-mean, or when nothing is close the names to pick from:
// "(<what>: a, b, c)".
std::string DidYouMeanOrList(std::string_view word, std::span<const std::string> candidates,
                             std::string_view what);

}  // namespace fmstack
