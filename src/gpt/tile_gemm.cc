#include "gpt/tile_gemm.h"

#include <algorithm>
#include <vector>

#if (defined(__AVX2__) && defined(__FMA__)) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace fmstack::gpt {
namespace {

#if defined(__AVX2__) && defined(__FMA__)
// The register types a tile is written in. A tile of R rows x 2 kLanes
// columns holds 2R accumulators, and each step of the inner dimension
// loads two B vectors and broadcasts R elements of A. Each term is one
// multiply-add, in order, so every register width gives the same bits.
struct Avx2 {
  using Reg = __m256;
  static constexpr int64_t kLanes = 8;
  static Reg Zero() { return _mm256_setzero_ps(); }
  static Reg Load(const float* p) { return _mm256_loadu_ps(p); }
  static Reg Broadcast(float x) { return _mm256_set1_ps(x); }
  static Reg Fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg Mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg Add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static void Store(float* p, Reg x) { _mm256_storeu_ps(p, x); }
};

template <class V, int R>
void Tile(int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col, const float* b,
          int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  constexpr int64_t kLanes = V::kLanes;
  typename V::Reg lo[R], hi[R];
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = V::Zero();
  for (int64_t p = 0; p < k; ++p) {
    const auto b_lo = V::Load(b + p * ldb);
    const auto b_hi = V::Load(b + p * ldb + kLanes);
    const float* ap = a + p * a_col;
    for (int r = 0; r < R; ++r) {
      const auto x = V::Broadcast(ap[r * a_row]);
      lo[r] = V::Fma(x, b_lo, lo[r]);
      hi[r] = V::Fma(x, b_hi, hi[r]);
    }
  }
  const auto scale = V::Broadcast(alpha);
  for (int r = 0; r < R; ++r) {
    float* row = c + r * ldc;
    auto out_lo = V::Mul(scale, lo[r]);
    auto out_hi = V::Mul(scale, hi[r]);
    if (accumulate) {
      out_lo = V::Add(out_lo, V::Load(row));
      out_hi = V::Add(out_hi, V::Load(row + kLanes));
    }
    V::Store(row, out_lo);
    V::Store(row + kLanes, out_hi);
  }
}

// 6 x 16: 12 of the 16 ymm registers, leaving room for the operands.
using Narrow = Avx2;
constexpr int64_t kNarrowRows = 6;
#else
// The same 6 x 16 tile in plain loops, for CPUs without AVX2 and FMA.
struct Plain {
  static constexpr int64_t kLanes = 8;
};

template <class V, int R>
void Tile(int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col, const float* b,
          int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  constexpr int64_t kCols = 2 * V::kLanes;
  float acc[R][kCols] = {};
  for (int64_t p = 0; p < k; ++p) {
    const float* ap = a + p * a_col;
    for (int r = 0; r < R; ++r) {
      const float x = ap[r * a_row];
      for (int64_t j = 0; j < kCols; ++j) acc[r][j] += x * b[p * ldb + j];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int64_t j = 0; j < kCols; ++j) {
      c[r * ldc + j] = (accumulate ? c[r * ldc + j] : 0.0f) + alpha * acc[r][j];
    }
  }
}

using Narrow = Plain;
constexpr int64_t kNarrowRows = 6;
#endif
constexpr int64_t kNarrowCols = 2 * Narrow::kLanes;

#if defined(__AVX512F__)
struct Avx512 {
  using Reg = __m512;
  static constexpr int64_t kLanes = 16;
  static Reg Zero() { return _mm512_setzero_ps(); }
  static Reg Load(const float* p) { return _mm512_loadu_ps(p); }
  static Reg Broadcast(float x) { return _mm512_set1_ps(x); }
  static Reg Fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg Mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg Add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static void Store(float* p, Reg x) { _mm512_storeu_ps(p, x); }
};

// 8 x 32: 16 of the 32 zmm registers; the two FMA ports stay busier than
// the two load ports (16 multiply-adds to 10 loads per step).
using Wide = Avx512;
constexpr int64_t kWideRows = 8;
constexpr int64_t kWideCols = 2 * Wide::kLanes;
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
template <class V, int kRows>
void RowSweep(int64_t m, int64_t k, float alpha, StridedMatrix a, const float* b, int64_t ldb,
              bool accumulate, float* c, int64_t ldc) {
  // A's fields go to the tiles as scalars: a 24-byte struct passes through
  // the stack, where reading it back stalled on store forwarding at each tile.
  const int64_t rs = a.row_stride, cs = a.col_stride;
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows)
    Tile<V, kRows>(k, alpha, a.data + i * rs, rs, cs, b, ldb, accumulate, c + i * ldc, ldc);
  static_assert(kRows <= 8, "the remainder below covers at most 7 rows");
  if (i + 4 <= m) {
    Tile<V, 4>(k, alpha, a.data + i * rs, rs, cs, b, ldb, accumulate, c + i * ldc, ldc);
    i += 4;
  }
  if (i + 2 <= m) {
    Tile<V, 2>(k, alpha, a.data + i * rs, rs, cs, b, ldb, accumulate, c + i * ldc, ldc);
    i += 2;
  }
  if (i < m) Tile<V, 1>(k, alpha, a.data + i * rs, rs, cs, b, ldb, accumulate, c + i * ldc, ldc);
}

}  // namespace

void TileGemm(int64_t m, int64_t n, int64_t k, float alpha, StridedMatrix a, const float* b,
              int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  int64_t j = 0;
#if defined(__AVX512F__)
  // B's 32-column panel is copied into consecutive rows first. Read in place,
  // rows ldb apart (256 to 1152 floats in attention) fall into a few L1 sets
  // and evict each other: 64 x 64 x 64 ran at 66-78 GFLOP/s with B strided
  // and 84-87 with it packed, on one core of the Intel VM. Rows at most 64
  // floats apart sit in consecutive lines already (84-113 unpacked in eight
  // of nine timings there).
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
    RowSweep<Wide, kWideRows>(m, k, alpha, a, bj, ldbj, accumulate, c + j, ldc);
  }
#endif
  for (; j + kNarrowCols <= n; j += kNarrowCols)
    RowSweep<Narrow, kNarrowRows>(m, k, alpha, a, b + j, ldb, accumulate, c + j, ldc);
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
