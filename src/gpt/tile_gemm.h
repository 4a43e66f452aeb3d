// gpt: a register-tiled matmul for the small products inside causal
// attention, where sgemm is slow.
//
// Attention multiplies blocks of 64 query rows by at most T keys, with inner
// sizes of the head width (64) or the block's keys. OpenBLAS 0.3.21's
// Haswell/Zen path runs most of those shapes far below its large-matrix
// rate: on one Zen core 10-27 GFLOP/s against 35-40 for 1024 x 1024 x 384
// (./build/bench_attention prints both, product by product). A 6 x 16 tile
// of accumulators held in registers runs them at 34-43, because a block
// this small needs no cache blocking: each A element is broadcast once per
// 16 columns, each B row loaded once per 6 rows. Large products stay on
// sgemm, where packing and cache blocking win (the tile: 26-29 on
// 1024 x 1024 x 384).
//
// With AVX-512 the tile is 8 x 32 in 16-lane registers, over a copy of B's
// 32-column panel: OpenBLAS's SkylakeX kernels are faster than its Haswell
// ones on these shapes, and the 6 x 16 tile fell to 0.43-0.92 of them on the
// Intel VM (the 8 x 32 one: 0.9-1.4, bench_attention).
//
// Sums over the inner dimension run in order, one fused multiply-add per
// term, so the result is the same on every call for the same inputs.
#pragma once

#include <cstdint>

namespace fmstack::gpt {

// A read through strides: element (i, p) is data[i * row_stride + p *
// col_stride], so a row-major matrix and the transpose of one are both an A.
struct StridedMatrix {
  const float* data = nullptr;
  int64_t row_stride = 0;
  int64_t col_stride = 0;
};

// C (m x n, row-major, leading dimension ldc) = alpha * A (m x k) B (k x n,
// row-major, ldb), added to C when `accumulate`, else overwriting it (C is
// never read then). Single-threaded: callers parallelize over blocks.
void TileGemm(int64_t m, int64_t n, int64_t k, float alpha, StridedMatrix a, const float* b,
              int64_t ldb, bool accumulate, float* c, int64_t ldc);

// out (cols x rows, row-major) = the transpose of in (rows x cols, leading
// dimension ld): packs keys or values so that TileGemm reads them as B.
void PackTransposed(const float* in, int64_t rows, int64_t cols, int64_t ld, float* out);

}  // namespace fmstack::gpt
