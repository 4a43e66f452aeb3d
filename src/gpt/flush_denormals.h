// gpt: the CPU passes run with denormal floats flushed to zero.
//
// An x86 core takes a microcode assist, on the order of a hundred cycles,
// for an instruction whose input or result is denormal (below 1.2e-38 in
// magnitude). GCC turns the clamp inside ExpFast (fast_math.h) into a second
// path computed for every lane and then blended away: for GELU it is
// x / (1 + e^88), x times a denormal constant, so every vector took an
// assist and GELU's forward ran 7x slower than with the flags set
// (1.5M elements: 8.5 ms against 1.2 ms on the 2-core Intel VM), 6% of a
// gpt-mini step. Values that small carry nothing a model can use; CPU
// runtimes such as TensorFlow's and XLA's flush them in their compute
// threads for the same reason.
//
// Flush-to-zero (results) and denormals-are-zero (inputs) are bits of each
// thread's MXCSR, so the scope sets them on the calling thread and on every
// thread of the OpenMP pool, which OpenBLAS's OpenMP build shares; threads
// the pool starts later inherit them from the calling thread (POSIX: a new
// thread inherits its creator's floating-point environment). A no-op off
// x86. Deterministic: the same inputs give the same bits, run after run.
#pragma once

#include <cstdint>

namespace fmstack::gpt {

class FlushDenormalsScope {
 public:
  FlushDenormalsScope();
  // Puts back the control word the calling thread had, on it and on the pool.
  ~FlushDenormalsScope();
  FlushDenormalsScope(const FlushDenormalsScope&) = delete;
  FlushDenormalsScope& operator=(const FlushDenormalsScope&) = delete;

 private:
  uint32_t saved_ = 0;
};

// Whether the calling thread flushes denormals now (for tests).
bool FlushesDenormals();

}  // namespace fmstack::gpt
