#include "gpt/tile_gemm.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace fmstack::gpt {
namespace {

constexpr int64_t kTileRows = 6;
constexpr int64_t kTileCols = 16;

#if defined(__AVX2__) && defined(__FMA__)
// R rows x 16 columns: 2R accumulators of 8 lanes, two B loads and R
// broadcasts per step of the inner dimension (R = 6 uses 12 of the 16 ymm
// registers, leaving room for the operands).
template <int R>
void Tile(int64_t k, float alpha, StridedMatrix a, const float* b, int64_t ldb, bool accumulate,
          float* c, int64_t ldc) {
  __m256 lo[R], hi[R];
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const __m256 b_lo = _mm256_loadu_ps(b + p * ldb);
    const __m256 b_hi = _mm256_loadu_ps(b + p * ldb + 8);
    const float* ap = a.data + p * a.col_stride;
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(ap + r * a.row_stride);
      lo[r] = _mm256_fmadd_ps(x, b_lo, lo[r]);
      hi[r] = _mm256_fmadd_ps(x, b_hi, hi[r]);
    }
  }
  const __m256 scale = _mm256_set1_ps(alpha);
  for (int r = 0; r < R; ++r) {
    float* row = c + r * ldc;
    __m256 out_lo = _mm256_mul_ps(scale, lo[r]);
    __m256 out_hi = _mm256_mul_ps(scale, hi[r]);
    if (accumulate) {
      out_lo = _mm256_add_ps(out_lo, _mm256_loadu_ps(row));
      out_hi = _mm256_add_ps(out_hi, _mm256_loadu_ps(row + 8));
    }
    _mm256_storeu_ps(row, out_lo);
    _mm256_storeu_ps(row + 8, out_hi);
  }
}
#else
// The same tile in plain loops, for CPUs without AVX2 and FMA.
template <int R>
void Tile(int64_t k, float alpha, StridedMatrix a, const float* b, int64_t ldb, bool accumulate,
          float* c, int64_t ldc) {
  float acc[R][kTileCols] = {};
  for (int64_t p = 0; p < k; ++p) {
    const float* ap = a.data + p * a.col_stride;
    for (int r = 0; r < R; ++r) {
      const float x = ap[r * a.row_stride];
      for (int64_t j = 0; j < kTileCols; ++j) acc[r][j] += x * b[p * ldb + j];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int64_t j = 0; j < kTileCols; ++j) {
      c[r * ldc + j] = (accumulate ? c[r * ldc + j] : 0.0f) + alpha * acc[r][j];
    }
  }
}
#endif

// Columns past the last full tile: one dot product each.
void Edge(int64_t m, int64_t j0, int64_t n, int64_t k, float alpha, StridedMatrix a, const float* b,
          int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    const float* ai = a.data + i * a.row_stride;
    for (int64_t j = j0; j < n; ++j) {
      float sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += ai[p * a.col_stride] * b[p * ldb + j];
      c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0.0f) + alpha * sum;
    }
  }
}

}  // namespace

void TileGemm(int64_t m, int64_t n, int64_t k, float alpha, StridedMatrix a, const float* b,
              int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  const auto rows_at = [&](int64_t row) {
    return StridedMatrix{a.data + row * a.row_stride, a.row_stride, a.col_stride};
  };
  const int64_t full_cols = n / kTileCols * kTileCols;
  for (int64_t j = 0; j < full_cols; j += kTileCols) {
    int64_t i = 0;
    for (; i + kTileRows <= m; i += kTileRows)
      Tile<kTileRows>(k, alpha, rows_at(i), b + j, ldb, accumulate, c + i * ldc + j, ldc);
    float* cj = c + j;
    if (i + 4 <= m) {
      Tile<4>(k, alpha, rows_at(i), b + j, ldb, accumulate, cj + i * ldc, ldc);
      i += 4;
    }
    if (i + 2 <= m) {
      Tile<2>(k, alpha, rows_at(i), b + j, ldb, accumulate, cj + i * ldc, ldc);
      i += 2;
    }
    if (i < m) Tile<1>(k, alpha, rows_at(i), b + j, ldb, accumulate, cj + i * ldc, ldc);
  }
  if (full_cols < n) Edge(m, full_cols, n, k, alpha, a, b, ldb, accumulate, c, ldc);
}

// In bands of 8 rows: the band's input lines stay in cache while each
// output row gets 8 consecutive floats, where a plain double loop would
// touch a new cache line on every write (or every read).
void PackTransposed(const float* in, int64_t rows, int64_t cols, int64_t ld, float* out) {
  constexpr int64_t kBand = 8;
  for (int64_t r0 = 0; r0 < rows; r0 += kBand) {
    const int64_t r1 = r0 + kBand < rows ? r0 + kBand : rows;
    for (int64_t c = 0; c < cols; ++c) {
      for (int64_t r = r0; r < r1; ++r) out[c * rows + r] = in[r * ld + c];
    }
  }
}

}  // namespace fmstack::gpt
