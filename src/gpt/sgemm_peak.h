// gpt: the machine's measured matmul throughput — the denominator of the CPU
// trainer's MFU, since a CPU has no catalog peak.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fmstack::gpt {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;  // (m x k) @ (k x n)
};

// The matmuls of one training step of a GPT-2 model with these sizes:
// forward, backward-data and backward-weight of qkv, attention projection,
// MLP up/down and the LM head.
std::vector<GemmShape> TrainingGemms(int64_t rows, int64_t C, int64_t F, int64_t V);

// Best-of-`repeats` sgemm GFLOP/s over `shapes`, FLOP-weighted: what OpenBLAS
// achieves on exactly the work the trainer gives it, on the current threads.
double MeasureSgemmGflops(const std::vector<GemmShape>& shapes, int repeats = 3);
// The same for gpt/bf16_gemm.h: the CPU trainer's limit under matmul = "bf16".
double MeasureBf16GemmGflops(const std::vector<GemmShape>& shapes, int repeats = 3);

// What the cores sustain on registers alone: independent chains of fused
// multiply-adds of the widest vector this build targets, on `threads`
// threads at once (0 = all cores), the best of three runs of about `seconds`.
// sgemm's share of it tells slow arithmetic from slow data movement: on a
// shared VM a neighbour in the host's L3 halves sgemm while this holds.
struct FmaPeak {
  double gflops = 0;
  int lanes = 0;  // floats per vector
  int threads = 0;
  float checksum = 0;  // the chains' sum, so that they are computed
};
FmaPeak MeasureFmaPeak(int threads, double seconds = 0.2);

// One thread's chains (exposed for tests): kFmaChains vectors, chain i
// starting at i + 1, each step acc = fma(acc, kFmaChainX, kFmaChainY); the
// sum of every lane of every chain, chain by chain.
inline constexpr int kFmaChains = 12;
inline constexpr float kFmaChainX = 0.999999f, kFmaChainY = 1e-7f;
float FmaChains(int64_t iterations);

}  // namespace fmstack::gpt

namespace fmstack::gpt {
// Threads for the CPU backend's OpenMP loops and OpenBLAS; 0 = all cores.
// Process-wide runtime settings: call once from main, before training.
void SetCpuThreads(int threads);
int CpuThreads();
// The BLAS build the matmuls run on, for benchmark output:
// "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Cooperlake MAX_THREADS=64".
std::string BlasConfig();
// The kernels OpenBLAS picked for this CPU ("Haswell", "SkylakeX", ...).
std::string BlasCoreName();

}  // namespace fmstack::gpt
