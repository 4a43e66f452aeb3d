// gpt: OpenBLAS's kernels for CPUs newer than the OpenBLAS build.
//
// Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) picks its kernels by CPU model
// when it loads, and a model it does not know falls back to Prescott's SSE3
// kernels. On the 2-core Intel VM of 2026-11-28 (family 6 model 207, with
// AVX-512) sgemm of 1024 x 768 x 3072 ran at 62 GFLOP/s on them, 148 on
// Haswell's and 294-301 on SkylakeX's. OpenBLAS reads OPENBLAS_CORETYPE only
// when it loads, so the fix is to set it and start the program again. The
// same variable, set by an environment to a core narrower than the CPU,
// costs as much: the 2-core Zen 5 VM of 2026-11-29 (family 26) came with
// OPENBLAS_CORETYPE=Haswell set, and that sgemm ran at 195-200 GFLOP/s on
// Haswell's kernels and 349-361 on SkylakeX's or Cooperlake's (what 0.3.21
// picks there by itself).
#pragma once

#include <span>
#include <string>

namespace fmstack::gpt {

// The OpenBLAS core type this CPU's instructions can run ("SkylakeX" with
// AVX-512 F/CD/BW/DQ/VL, "Haswell" with AVX2 and FMA), or "" when the CPU
// has neither.
std::string BestBlasCoreForCpu();

// True when `best` is set and `chosen`, the core OpenBLAS runs (picked or
// pinned), is one of its fallbacks for CPUs it does not know (Prescott and
// older), or a core without AVX-512 kernels (Haswell, Zen) while `best` is
// SkylakeX.
bool IsBlasFallback(const std::string& chosen, const std::string& best);

// Whether an OPENBLAS_CORETYPE already in the environment stands. fmstack
// leaves the user's choice alone (BlasCoreNote says when it is narrower than
// the CPU's best); a bench replaces a narrower one, so that every side of a
// comparison, the PyTorch peer included, runs the kernels that are best here.
enum class BlasPin { kRespect, kReplaceNarrower };

// Call first thing in main. When OpenBLAS fell back (or, with
// kReplaceNarrower, the environment pinned a narrower core), sets
// OPENBLAS_CORETYPE to the best core and re-executes this program with the
// same arguments. The processes a bench starts inherit it, so its PyTorch
// peer runs the same kernels; `fmstack run` drops it from what it launches,
// restoring a pin it replaced (util/blas_env.h), and its fmstack workers set
// it again for themselves. Returns when nothing needs doing, or, with a
// warning on stderr, when the re-execution fails.
void ReexecWithBestBlasCore(std::span<char* const> argv, BlasPin pin = BlasPin::kRespect);

// "" unless this process runs with a core that ReexecWithBestBlasCore set
// (then says which, and what OpenBLAS had picked or what the environment had
// pinned), or with an environment's pin narrower than the CPU's best (then
// says so), for the run's log.
std::string BlasCoreNote();

}  // namespace fmstack::gpt
