// Comparing two programs on a machine whose speed moves over minutes (a
// shared VM): run them one right after the other, several rounds, and report
// the round whose ratio is the median. Both figures of that report then come
// from one moment of the machine, and the ratio is the median of ratios, not
// the ratio of two medians that may come from different moments.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

namespace fmstack {

// Seconds of one round: ours and the peer's, measured back to back.
struct TimedPair {
  double ours = 0, theirs = 0;
  // The peer's time over ours: above 1, we are faster. 0 when either is
  // missing.
  double Ratio() const { return ours > 0 && theirs > 0 ? theirs / ours : 0; }
};

// The round with the median ratio; where two share the middle (an even
// number of rounds), the one with the lower ratio. nullopt when there are no
// rounds or some round lacks a time.
inline std::optional<TimedPair> MedianRatioRound(std::span<const TimedPair> rounds) {
  if (rounds.empty()) return std::nullopt;
  std::vector<TimedPair> sorted(rounds.begin(), rounds.end());
  if (!std::ranges::all_of(sorted, [](const TimedPair& p) { return p.Ratio() > 0; }))
    return std::nullopt;
  std::ranges::sort(sorted, {}, &TimedPair::Ratio);
  return sorted[(sorted.size() - 1) / 2];
}

// A sweep of sizes from `min` to `max`, each 4x the last, cut into spans of
// at most `per_span` sizes (0: one span), in order. Each span is one run of
// each side: the fewer sizes a run has, the closer in time the two sides'
// runs of a size are. Empty when min is 0 or above max.
struct SizeSpan {
  size_t min = 0, max = 0;  // the span's first and last size
};
inline std::vector<SizeSpan> SizeSpans(size_t min, size_t max, int per_span) {
  std::vector<SizeSpan> spans;
  if (min == 0 || max < min) return spans;
  int in_span = 0;
  for (size_t bytes = min; bytes <= max; bytes *= 4) {
    if (spans.empty() || (per_span > 0 && in_span == per_span)) {
      spans.push_back({bytes, bytes});
      in_span = 0;
    }
    spans.back().max = bytes;
    ++in_span;
    if (bytes > max / 4) break;  // the next size would pass max (or overflow)
  }
  return spans;
}

}  // namespace fmstack
