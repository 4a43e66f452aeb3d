#include "gpt/sgemm_peak.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>

#include "gpt/bf16_gemm.h"
#include "util/huge_pages.h"

namespace fmstack::gpt {

std::vector<GemmShape> TrainingGemms(int64_t rows, int64_t C, int64_t F, int64_t V) {
  std::vector<GemmShape> g;
  for (const auto& [in, out] : {std::pair{C, 3 * C}, {C, C}, {C, F}, {F, C}, {C, V}}) {
    g.push_back({rows, out, in});  // forward
    g.push_back({rows, in, out});  // gradient wrt the input
    g.push_back({out, in, rows});  // gradient wrt the weight
  }
  return g;
}

namespace {

// Best-of-`repeats` GFLOP/s of `multiply` over `shapes`, FLOP-weighted,
// on operands of the largest shape's size.
template <class Multiply>
double MeasureGflops(const std::vector<GemmShape>& shapes, int repeats, Multiply multiply) {
  int64_t biggest = 0;
  for (const GemmShape& s : shapes) biggest = std::max({biggest, s.m * s.k, s.k * s.n, s.m * s.n});
  // On huge pages, as the trainer's buffers are: the limit is the machine's
  // best, not one that the trainer's own allocation beats.
  const auto n = static_cast<size_t>(biggest);
  const HugeFloats a(n, 0.5f), b(n, 0.25f);
  HugeFloats c(n, 0.0f);
  double flops = 0;
  for (const GemmShape& s : shapes) flops += 2.0 * static_cast<double>(s.m * s.n * s.k);
  double best = 0;
  for (int r = 0; r < repeats + 1; ++r) {  // the first round warms up
    const auto start = std::chrono::steady_clock::now();
    for (const GemmShape& s : shapes) multiply(s, a.data(), b.data(), c.data());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r > 0) best = std::max(best, flops / seconds / 1e9);
  }
  return best;
}

}  // namespace

double MeasureSgemmGflops(const std::vector<GemmShape>& shapes, int repeats) {
  return MeasureGflops(
      shapes, repeats, [](const GemmShape& s, const float* a, const float* b, float* c) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(s.m),
                    static_cast<blasint>(s.n), static_cast<blasint>(s.k), 1.0f, a,
                    static_cast<blasint>(s.k), b, static_cast<blasint>(s.n), 0.0f, c,
                    static_cast<blasint>(s.n));
      });
}

double MeasureBf16GemmGflops(const std::vector<GemmShape>& shapes, int repeats) {
  return MeasureGflops(shapes, repeats,
                       [](const GemmShape& s, const float* a, const float* b, float* c) {
                         Bf16Gemm(s.m, s.n, s.k, {a, s.k, 1}, {b, s.n, 1}, false, c, s.n);
                       });
}

}  // namespace fmstack::gpt

#include <omp.h>

#include "gpt/blas_core.h"

namespace fmstack::gpt {
void SetCpuThreads(int threads) {
  const int n = threads > 0 ? threads : omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}
int CpuThreads() {
  return omp_get_max_threads();
}
std::string BlasConfig() {
  const char* config = openblas_get_config();
  const std::string note = BlasCoreNote();
  return std::string(config != nullptr ? config : "OpenBLAS (no build string)") +
         (note.empty() ? "" : " (" + note + ")");
}
std::string BlasCoreName() {
  const char* core = openblas_get_corename();
  return core != nullptr ? core : "unknown";
}

}  // namespace fmstack::gpt
