#include "serve/limits.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "util/huge_pages.h"

namespace fmstack::serve {

double MeasureReadBandwidth(int64_t bytes) {
  const int64_t n = std::max<int64_t>(bytes / 4, 1 << 20);
  HugeFloats buf(static_cast<size_t>(n), 1.0f);
  double best = 0;
  volatile float sink = 0;
  for (int round = 0; round < 4; ++round) {  // the first warms the pages
    const auto start = std::chrono::steady_clock::now();
    float total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (int64_t b = 0; b < n; b += 4096) {
      float acc[16] = {};
      const int64_t end = std::min(n, b + 4096);
      for (int64_t i = b; i + 16 <= end; i += 16)
        for (int j = 0; j < 16; ++j) acc[j] += buf[static_cast<size_t>(i + j)];
      for (float a : acc) total += a;
    }
    sink = sink + total;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (round > 0) best = std::max(best, static_cast<double>(n) * 4 / s / 1e9);
  }
  return best;
}

}  // namespace fmstack::serve
