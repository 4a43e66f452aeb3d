// TileGemm (gpt/tile_gemm.h) against a plain triple loop in double, over
// every path it has: full 6-row (8-row with AVX-512) tiles and the 4/2/1-row
// remainders, full 32-column (AVX-512) and 16-column tiles and the edge columns, A read straight or
// transposed, overwrite and accumulate.
#include "gpt/tile_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace fmstack::gpt {
namespace {

float Value(int64_t i, int salt) {
  return static_cast<float>((i * 7919 + salt * 104729) % 2001 - 1000) / 1000.0f;
}

struct Case {
  int64_t m, n, k;
  bool transposed_a, accumulate;
};

// C = alpha A B (+ C) with A stored m x k (or k x m when transposed) and
// padded leading dimensions, so a stride bug reads the padding.
void Check(const Case& t) {
  const int64_t lda = (t.transposed_a ? t.m : t.k) + 3, ldb = t.n + 5, ldc = t.n + 2;
  const int64_t a_rows = t.transposed_a ? t.k : t.m;
  std::vector<float> a(a_rows * lda), b(t.k * ldb), c(t.m * ldc);
  for (size_t i = 0; i < a.size(); ++i) a[i] = Value(static_cast<int64_t>(i), 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = Value(static_cast<int64_t>(i), 2);
  for (size_t i = 0; i < c.size(); ++i) c[i] = Value(static_cast<int64_t>(i), 3);
  const std::vector<float> before = c;
  const StridedMatrix view =
      t.transposed_a ? StridedMatrix{a.data(), 1, lda} : StridedMatrix{a.data(), lda, 1};
  const float alpha = 0.75f;
  TileGemm(t.m, t.n, t.k, alpha, view, b.data(), ldb, t.accumulate, c.data(), ldc);
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = c[i * ldc + j];
      if (j >= t.n) {  // past the matrix: untouched
        ASSERT_EQ(got, before[i * ldc + j]) << "padding at " << i << "," << j;
        continue;
      }
      double want = 0, scale = 0;
      for (int64_t p = 0; p < t.k; ++p) {
        const double x = t.transposed_a ? a[p * lda + i] : a[i * lda + p];
        want += x * b[p * ldb + j];
        scale += std::abs(x * b[p * ldb + j]);
      }
      want *= alpha;
      if (t.accumulate) want += before[i * ldc + j];
      ASSERT_NEAR(got, want, 1e-6 * (1 + scale + std::abs(want)))
          << "m " << t.m << " n " << t.n << " k " << t.k << " at " << i << "," << j;
    }
  }
}

TEST(TileGemm, MatchesThePlainLoopOnEveryPath) {
  for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 15, 64}) {
    for (int64_t n : {1, 15, 16, 17, 31, 32, 33, 48, 49, 64}) {
      for (int64_t k : {1, 7, 64}) {
        for (bool transposed : {false, true}) {
          for (bool accumulate : {false, true}) Check({m, n, k, transposed, accumulate});
        }
      }
    }
  }
}

// Overwrite means C is never read: NaN there must not leak into the result.
TEST(TileGemm, OverwriteNeverReadsC) {
  const int64_t m = 7, n = 19, k = 5;
  std::vector<float> a(m * k, 0.5f), b(k * n, 0.25f), c(m * n, std::nanf(""));
  TileGemm(m, n, k, 1.0f, {a.data(), k, 1}, b.data(), n, false, c.data(), n);
  for (float x : c) ASSERT_FLOAT_EQ(x, 5 * 0.5f * 0.25f);
}

TEST(TileGemm, PackTransposedIsTheTranspose) {
  const int64_t rows = 13, cols = 5, ld = 9;
  std::vector<float> in(rows * ld), out(cols * rows);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  PackTransposed(in.data(), rows, cols, ld, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(out[c * rows + r], in[r * ld + c]);
  }
}

}  // namespace
}  // namespace fmstack::gpt
