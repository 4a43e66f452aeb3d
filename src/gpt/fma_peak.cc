// Register-only multiply-adds, the arithmetic limit that sgemm is held to.
// Built with -march=native and -ffp-contract=fast (CMakeLists.txt), so that
// `acc * x + y` is one fused multiply-add of the widest vector this build
// targets; under ISO C++ GCC would otherwise keep the multiply and the add.
#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>

#include "gpt/sgemm_peak.h"

namespace fmstack::gpt {
namespace {

#if defined(__AVX512F__)
constexpr int kLanes = 16;
#elif defined(__AVX__)
constexpr int kLanes = 8;
#else
constexpr int kLanes = 4;
#endif
using Vec = float __attribute__((vector_size(kLanes * sizeof(float))));

// Seconds for `iterations` on each of `threads` threads at once.
double TimeChains(int threads, int64_t iterations, float& sink) {
  const auto start = std::chrono::steady_clock::now();
  float sum = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sum)
  sum += FmaChains(iterations);
  sink += sum;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

// kFmaChains (12) independent chains: an FMA's latency (4-5 cycles) times
// two ports needs 8-10 in flight, and twelve still fit AVX2's sixteen
// registers with the two constants.
// The chains start at 1..12 and converge on y / (1 - x) = 0.1, so no value
// goes denormal or infinite; the returned sum keeps the loop from being
// optimized away.
float FmaChains(int64_t iterations) {
  std::array<Vec, kFmaChains> acc;
  for (int i = 0; i < kFmaChains; ++i) acc[i] = Vec{} + static_cast<float>(i + 1);
  const Vec x = Vec{} + kFmaChainX, y = Vec{} + kFmaChainY;
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kFmaChains; ++i) acc[i] = acc[i] * x + y;
  }
  float sum = 0;
  for (const Vec& v : acc) {
    for (int j = 0; j < kLanes; ++j) sum += v[j];
  }
  return sum;
}

FmaPeak MeasureFmaPeak(int threads, double seconds) {
  const int n = threads > 0 ? threads : omp_get_num_procs();
  float sink = 0;
  // Calibrate on a short run, then size each of three runs to `seconds`.
  constexpr int64_t kProbe = 1 << 20;
  const double probe = std::max(TimeChains(n, kProbe, sink), 1e-6);
  const auto iterations = std::max<int64_t>(
      kProbe, static_cast<int64_t>(static_cast<double>(kProbe) * seconds / probe));
  const double flops = 2.0 * kLanes * kFmaChains * static_cast<double>(iterations) * n;
  double best = 0;
  for (int r = 0; r < 3; ++r) best = std::max(best, flops / TimeChains(n, iterations, sink) / 1e9);
  return FmaPeak{.gflops = best, .lanes = kLanes, .threads = n, .checksum = sink};
}

}  // namespace fmstack::gpt
