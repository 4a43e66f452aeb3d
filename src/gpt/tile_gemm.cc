#include "gpt/tile_gemm.h"

#include <algorithm>
#include <vector>

#if (defined(__AVX2__) && defined(__FMA__)) || defined(__AVX512F__)
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
void Tile(int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col, const float* b,
          int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  __m256 lo[R], hi[R];
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const __m256 b_lo = _mm256_loadu_ps(b + p * ldb);
    const __m256 b_hi = _mm256_loadu_ps(b + p * ldb + 8);
    const float* ap = a + p * a_col;
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(ap + r * a_row);
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
void Tile(int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col, const float* b,
          int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  float acc[R][kTileCols] = {};
  for (int64_t p = 0; p < k; ++p) {
    const float* ap = a + p * a_col;
    for (int r = 0; r < R; ++r) {
      const float x = ap[r * a_row];
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

#if defined(__AVX512F__)
constexpr int64_t kWideRows = 8;
constexpr int64_t kWideCols = 32;

// R rows x 32 columns in 16-lane registers: 2R accumulators, two B loads and
// R broadcasts per step of the inner dimension. R = 8 uses 16 of the 32 zmm
// registers and keeps the two FMA ports busier than the two load ports (16
// multiply-adds to 10 loads). Each term is one multiply-add, in the same
// order as Tile's, so the two give the same bits.
template <int R>
void WideTile(int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col, const float* b,
              int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  __m512 lo[R], hi[R];
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const __m512 b_lo = _mm512_loadu_ps(b + p * ldb);
    const __m512 b_hi = _mm512_loadu_ps(b + p * ldb + 16);
    const float* ap = a + p * a_col;
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(ap[r * a_row]);
      lo[r] = _mm512_fmadd_ps(x, b_lo, lo[r]);
      hi[r] = _mm512_fmadd_ps(x, b_hi, hi[r]);
    }
  }
  const __m512 scale = _mm512_set1_ps(alpha);
  for (int r = 0; r < R; ++r) {
    float* row = c + r * ldc;
    __m512 out_lo = _mm512_mul_ps(scale, lo[r]);
    __m512 out_hi = _mm512_mul_ps(scale, hi[r]);
    if (accumulate) {
      out_lo = _mm512_add_ps(out_lo, _mm512_loadu_ps(row));
      out_hi = _mm512_add_ps(out_hi, _mm512_loadu_ps(row + 16));
    }
    _mm512_storeu_ps(row, out_lo);
    _mm512_storeu_ps(row + 16, out_hi);
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

// Rows [0, m) of one column tile: full tiles of kRows, then 4, 2 and 1 rows.
template <int64_t kRows, template <int> class Kernel>
void RowSweep(int64_t m, int64_t k, float alpha, StridedMatrix a, const float* b, int64_t ldb,
              bool accumulate, float* c, int64_t ldc) {
  // A's fields go to the kernels as scalars: a 24-byte struct passes through
  // the stack, where reading it back stalled on store forwarding at each tile.
  const int64_t rs = a.row_stride, cs = a.col_stride;
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows)
    Kernel<kRows>::Run(k, alpha, a.data + i * rs, rs, cs, b, ldb, accumulate, c + i * ldc, ldc);
  static_assert(kRows <= 8, "the remainder below covers at most 7 rows");
  if (i + 4 <= m) {
    Kernel<4>::Run(k, alpha, a.data + i * rs, rs, cs, b, ldb, accumulate, c + i * ldc, ldc);
    i += 4;
  }
  if (i + 2 <= m) {
    Kernel<2>::Run(k, alpha, a.data + i * rs, rs, cs, b, ldb, accumulate, c + i * ldc, ldc);
    i += 2;
  }
  if (i < m)
    Kernel<1>::Run(k, alpha, a.data + i * rs, rs, cs, b, ldb, accumulate, c + i * ldc, ldc);
}

// The two tile shapes behind one name, for RowSweep.
template <int R>
struct NarrowKernel {
  static void Run(int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col,
                  const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
    Tile<R>(k, alpha, a, a_row, a_col, b, ldb, accumulate, c, ldc);
  }
};

#if defined(__AVX512F__)
template <int R>
struct WideKernel {
  static void Run(int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col,
                  const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
    WideTile<R>(k, alpha, a, a_row, a_col, b, ldb, accumulate, c, ldc);
  }
};
#endif

}  // namespace

void TileGemm(int64_t m, int64_t n, int64_t k, float alpha, StridedMatrix a, const float* b,
              int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  int64_t j = 0;
#if defined(__AVX512F__)
  // B's 32-column panel is copied into consecutive rows first. Read in place,
  // rows ldb apart (256 to 1152 floats in attention) fall into a few L1 sets
  // and evict each other: 64 x 64 x 64 ran at 66-78 GFLOP/s with B strided
  // and 84-87 with it packed, on one core of the Intel VM. Rows at most 64
  // floats apart sit in consecutive lines already (and ran at 110 unpacked).
  const bool pack = ldb > 2 * kWideCols;
  std::vector<float> panel(pack ? static_cast<size_t>(k * kWideCols) : 0);
  for (; j + kWideCols <= n; j += kWideCols) {
    const float* bj = b + j;
    int64_t ldbj = ldb;
    if (pack) {
      for (int64_t p = 0; p < k; ++p)
        std::copy_n(b + p * ldb + j, kWideCols, panel.data() + p * kWideCols);
      bj = panel.data(), ldbj = kWideCols;
    }
    RowSweep<kWideRows, WideKernel>(m, k, alpha, a, bj, ldbj, accumulate, c + j, ldc);
  }
#endif
  for (; j + kTileCols <= n; j += kTileCols)
    RowSweep<kTileRows, NarrowKernel>(m, k, alpha, a, b + j, ldb, accumulate, c + j, ldc);
  if (j < n) Edge(m, j, n, k, alpha, a, b, ldb, accumulate, c, ldc);
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
