// gpt: OpenBLAS's kernels for CPUs newer than the OpenBLAS build.
//
// Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) picks its kernels by CPU model
// when it loads, and a model it does not know falls back to Prescott's SSE3
// kernels. On the 2-core Intel VM of 2026-11-28 (family 6 model 207, with
// AVX-512) sgemm of 1024 x 768 x 3072 ran at 62 GFLOP/s on them, 148 on
// Haswell's and 294-301 on SkylakeX's. OpenBLAS reads OPENBLAS_CORETYPE only
// when it loads, so the fix is to set it and start the program again.
#pragma once

#include <span>
#include <string>

namespace fmstack::gpt {

// The OpenBLAS core type this CPU's instructions can run ("SkylakeX" with
// AVX-512 F/CD/BW/DQ/VL, "Haswell" with AVX2 and FMA), or "" when the CPU
// has neither.
std::string BestBlasCoreForCpu();

// True when `chosen`, the core OpenBLAS picked, is one of its fallbacks for
// CPUs it does not know (Prescott and older) and `best` is set.
bool IsBlasFallback(const std::string& chosen, const std::string& best);

// Call first thing in main. When OpenBLAS fell back and OPENBLAS_CORETYPE is
// not set, sets it to the best core and re-executes this program with the
// same arguments. The processes a bench starts inherit it, so its PyTorch
// peer runs the same kernels; `fmstack run` drops it from what it launches
// (util/blas_env.h), and its fmstack workers set it again for themselves.
// Returns when nothing needs doing, or, with a warning on stderr, when the
// re-execution fails.
void ReexecWithBestBlasCore(std::span<char* const> argv);

// "" unless this process runs with the core that ReexecWithBestBlasCore set:
// then says which, and what OpenBLAS had picked, for the run's log.
std::string BlasCoreNote();

}  // namespace fmstack::gpt
