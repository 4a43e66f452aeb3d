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
