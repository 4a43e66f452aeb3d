// The benches' median of a few rounds: the upper middle value of an even
// count, so that it is always a time that was measured.
#pragma once

#include <algorithm>
#include <vector>

namespace fmstack::bench {

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace fmstack::bench
