// gpt: the CPU trainer's bf16 matmul (train.matmul = "bf16" on the CPU):
// fp32 operands rounded to bf16 as they are packed, products summed in
// fp32, C in fp32. The same contract as the CUDA backend's bf16 mode: the
// linear layers' operands in bf16, master weights, gradients and everything
// else in fp32.
//
// On a CPU with AVX-512 BF16 (Zen 4, Cooper Lake, Sapphire Rapids) a
// 12 x 32 tile of VDPBF16PS runs two multiply-adds per fp32 lane per
// instruction: on one Zen 4 core the tile alone ran 230 GFLOP/s, twice the
// fp32 FMA peak (116). Around it, BLIS's blocking: B packed in blocks of
// kKc x kNc into 32-column panels, A in blocks of kMc x kKc into 12-row
// panels, both as pairs of consecutive inner-dimension elements (the
// instruction's operand). Threads split C's rows: each packs its own rows
// of A and its share of each block of B's panels, which all of them then
// read, so nothing is packed twice (a C of fewer 12-row panels than threads
// splits its columns instead). Each element of C is one thread's sum
// in one order, so the bits do not depend on the thread count.
// Elsewhere the same blocking runs a plain-loop tile that
// computes what the instruction does, for tests on any CPU; it is slow, and
// the trainer refuses bf16 there (Bf16GemmIsFast).
#pragma once

#include <cstdint>

#include "gpt/tile_gemm.h"

namespace fmstack::gpt {

// fp32 -> bf16, rounding to nearest even; a NaN stays a (quiet) NaN.
uint16_t ToBf16(float x);
float FromBf16(uint16_t x);

// C (m x n, row-major, leading dimension ldc) = bf16(A) bf16(B), added to C
// when `accumulate`, else overwriting it (C is not read then). A is m x k,
// B is k x n, both read through strides (tile_gemm.h's StridedMatrix: B's
// element (p, j) is data[p * row_stride + j * col_stride]). Runs on OpenMP's
// threads, or on the calling thread alone inside a parallel region.
void Bf16Gemm(int64_t m, int64_t n, int64_t k, StridedMatrix a, StridedMatrix b, bool accumulate,
              float* c, int64_t ldc);

// Whether this build and this CPU run the AVX-512 BF16 tile.
bool Bf16GemmIsFast();

}  // namespace fmstack::gpt
