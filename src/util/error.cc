#include "util/error.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace fmstack {

std::string SourcePos::ToString() const {
  std::string s = file.empty() ? std::string("<input>") : file;
  if (line > 0) {
    s += ":" + std::to_string(line);
    if (column > 0) s += ":" + std::to_string(column);
  }
  return s;
}

namespace {
std::string ComposeSpecMessage(const SourcePos& pos, const std::string& key,
                               const std::string& problem, const std::string& hint) {
  std::string msg = pos.ToString() + ": ";
  if (!key.empty()) msg += "key '" + key + "': ";
  msg += problem;
  if (!hint.empty()) msg += " " + hint;
  return msg;
}
}  // namespace

SpecError::SpecError(SourcePos pos, std::string key, std::string problem, std::string hint)
    : Error(ComposeSpecMessage(pos, key, problem, hint)),
      pos_(std::move(pos)),
      key_(std::move(key)),
      problem_(std::move(problem)) {}

size_t EditDistance(std::string_view a, std::string_view b) {
  // Optimal string alignment: insertions, deletions, substitutions and
  // transpositions of neighbours ("trian" -> "train") each cost 1.
  auto same = [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  };
  const size_t w = b.size() + 1;
  std::vector<size_t> d((a.size() + 1) * w);
  for (size_t i = 0; i <= a.size(); ++i) d[i * w] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = same(a[i - 1], b[j - 1]) ? 0 : 1;
      size_t best =
          std::min({d[(i - 1) * w + j] + 1, d[i * w + j - 1] + 1, d[(i - 1) * w + j - 1] + cost});
      if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1])) {
        best = std::min(best, d[(i - 2) * w + j - 2] + 1);
      }
      d[i * w + j] = best;
    }
  }
  return d[a.size() * w + b.size()];
}

std::optional<std::string> ClosestMatch(std::string_view word,
                                        std::span<const std::string> candidates) {
  const size_t limit = std::max<size_t>(1, word.size() / 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const size_t d = EditDistance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::string DidYouMean(std::string_view word, std::span<const std::string> candidates) {
  const auto match = ClosestMatch(word, candidates);
  return match ? "(did you mean '" + *match + "'?)" : std::string();
}

std::string DidYouMeanOrList(std::string_view word, std::span<const std::string> candidates,
                             std::string_view what) {
  std::string hint = DidYouMean(word, candidates);
  if (!hint.empty()) return hint;
  std::string list;
  for (const std::string& n : candidates) list += (list.empty() ? "" : ", ") + n;
  return "(" + std::string(what) + ": " + list + ")";
}

}  // namespace fmstack
