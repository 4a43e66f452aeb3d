// Bf16Gemm (gpt/bf16_gemm.h) against a double loop over the bf16-rounded
// operands, on every packing path (A and B each read along rows, along
// columns, or through general strides), tile edges, odd inner sizes and
// inner blocks, overwrite and accumulate; its rounding against IEEE
// round-to-nearest-even; and the same bits on one thread and on several.
#include "gpt/bf16_gemm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace fmstack::gpt {
namespace {

float Value(int64_t i, int salt) {
  return static_cast<float>((i * 7919 + salt * 104729) % 2001 - 1000) / 997.0f;
}

double Rounded(float x) {
  return FromBf16(ToBf16(x));
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(ToBf16(-2.0f), 0xc000);
  EXPECT_EQ(ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);        // a tie: down to even
  EXPECT_EQ(ToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);    // a tie: up to even
  EXPECT_EQ(ToBf16(1.0f + std::ldexp(1.0f, -9)), 0x3f80);        // below half
  EXPECT_EQ(ToBf16(1.0f + 5 * std::ldexp(1.0f, -9)), 0x3f81);    // above half
  EXPECT_EQ(ToBf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to infinity
  EXPECT_EQ(ToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(FromBf16(ToBf16(std::numeric_limits<float>::quiet_NaN()))));
  uint32_t signaling = 0x7f800001;  // only a low mantissa bit: must not become infinity
  float snan;
  std::memcpy(&snan, &signaling, sizeof snan);
  EXPECT_TRUE(std::isnan(FromBf16(ToBf16(snan))));
  EXPECT_EQ(ToBf16(std::numeric_limits<float>::denorm_min()), 0x0000);  // as the instruction
  EXPECT_EQ(ToBf16(-std::numeric_limits<float>::denorm_min()), 0x8000);
  EXPECT_EQ(FromBf16(0x3fc0), 1.5f);
}

// Each operand stored one of three ways, with padded leading dimensions so
// that a stride bug reads the padding.
enum class Store { kRows, kColumns, kStrided };

struct Stored {
  std::vector<float> data;
  StridedMatrix view;
};

// An r x c matrix whose element (i, j) is Value(i * c + j, salt).
Stored Make(int64_t r, int64_t c, Store how, int salt) {
  Stored s;
  switch (how) {
    case Store::kRows:  // element (i, j) at i * (c + 3) + j
      s.data.assign(r * (c + 3), 9.0f);
      s.view = {nullptr, c + 3, 1};
      break;
    case Store::kColumns:  // at j * (r + 5) + i
      s.data.assign(c * (r + 5), 9.0f);
      s.view = {nullptr, 1, r + 5};
      break;
    case Store::kStrided:  // at i * 2 * (c + 1) + 2 * j: neither stride is 1
      s.data.assign(r * 2 * (c + 1), 9.0f);
      s.view = {nullptr, 2 * (c + 1), 2};
      break;
  }
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < c; ++j)
      s.data[i * s.view.row_stride + j * s.view.col_stride] = Value(i * c + j, salt);
  }
  s.view.data = s.data.data();
  return s;
}

struct Case {
  int64_t m, n, k;
};

void Check(const Case& t, Store a_how, Store b_how, bool accumulate) {
  const Stored a = Make(t.m, t.k, a_how, 1), b = Make(t.k, t.n, b_how, 2);
  const int64_t ldc = t.n + 2;
  std::vector<float> c(t.m * ldc);
  for (size_t i = 0; i < c.size(); ++i) c[i] = Value(static_cast<int64_t>(i), 3);
  const std::vector<float> before = c;
  Bf16Gemm(t.m, t.n, t.k, a.view, b.view, accumulate, c.data(), ldc);
  const auto at = [](const StridedMatrix& x, int64_t i, int64_t j) {
    return x.data[i * x.row_stride + j * x.col_stride];
  };
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = c[i * ldc + j];
      if (j >= t.n) {
        ASSERT_EQ(got, before[i * ldc + j]) << "padding at " << i << "," << j;
        continue;
      }
      double want = accumulate ? before[i * ldc + j] : 0.0, scale = 0;
      for (int64_t p = 0; p < t.k; ++p) {
        const double term = Rounded(at(a.view, i, p)) * Rounded(at(b.view, p, j));
        want += term;
        scale += std::abs(term);
      }
      // fp32 sums of exact products: a few units of fp32 rounding per term.
      ASSERT_NEAR(got, want, 1e-6 * (1 + scale + std::abs(want)))
          << "m " << t.m << " n " << t.n << " k " << t.k << " A " << static_cast<int>(a_how)
          << " B " << static_cast<int>(b_how) << " accumulate " << accumulate << " at " << i << ","
          << j;
    }
  }
}

TEST(Bf16Gemm, MatchesADoubleLoopOnEveryPath) {
  // Full tiles and edges in both directions (12 x 32 tiles), odd inner sizes
  // (a last pair with zero), several inner, row and column blocks (1024, 192,
  // 3072), and the 16-line transposes and 16-lane runs of the vector packing
  // with their tails.
  const std::vector<Case> cases = {{1, 1, 1},    {12, 32, 2},   {13, 33, 3},  {5, 70, 31},
                                   {25, 17, 64}, {200, 40, 33}, {40, 800, 9}, {24, 64, 1025},
                                   {7, 9, 1600}, {390, 50, 40}, {36, 96, 96}, {13, 3100, 40}};
  for (const Case& t : cases) {
    for (const Store a : {Store::kRows, Store::kColumns, Store::kStrided}) {
      for (const Store b : {Store::kRows, Store::kColumns, Store::kStrided}) {
        for (const bool accumulate : {false, true}) Check(t, a, b, accumulate);
      }
    }
  }
}

// Every element's sum is one thread's, in one order, however the product
// is split: tall, wide, narrower than a thread's share of B's panels
// (threads that pack none of a block still wait for it), and with fewer
// row panels than threads (split by columns instead), over several inner
// blocks.
TEST(Bf16Gemm, OneThreadAndSeveralGiveTheSameBits) {
  struct Shape {
    int64_t m, n, k;
  };
  const int threads = omp_get_max_threads();
  for (const Shape& s :
       std::vector<Shape>{{150, 230, 900}, {230, 150, 900}, {100, 20, 1600}, {5, 300, 1100}}) {
    const Stored a = Make(s.m, s.k, Store::kRows, 4), b = Make(s.k, s.n, Store::kColumns, 5);
    std::vector<float> one(s.m * s.n), several(s.m * s.n);
    omp_set_num_threads(1);
    Bf16Gemm(s.m, s.n, s.k, a.view, b.view, false, one.data(), s.n);
    omp_set_num_threads(3);
    Bf16Gemm(s.m, s.n, s.k, a.view, b.view, false, several.data(), s.n);
    omp_set_num_threads(threads);
    EXPECT_EQ(std::memcmp(one.data(), several.data(), one.size() * sizeof(float)), 0)
        << s.m << " x " << s.n << " x " << s.k;
  }
}

// The vector packing converts with VCVTNEPS2BF16 where the scalar path uses
// ToBf16: a product by 1 shows each element's rounding on both.
TEST(Bf16Gemm, PackingRoundsAsToBf16) {
  std::vector<float> xs = {1.0f + std::ldexp(1.0f, -8),
                           1.0f + 3 * std::ldexp(1.0f, -8),
                           -3.14159f,
                           65504.0f,
                           1e-30f,
                           std::numeric_limits<float>::denorm_min(),
                           std::numeric_limits<float>::max(),
                           0.0f,
                           -0.0f,
                           7.0e-3f};
  while (xs.size() < 64) xs.push_back(Value(static_cast<int64_t>(xs.size()), 6) * 1e3f);
  const auto n = static_cast<int64_t>(xs.size());
  const std::vector<float> one(n, 1.0f);
  std::vector<float> c(n);
  // A as a column along rows (m = n, k = 1): the run packing; B = 1.
  Bf16Gemm(n, 1, 1, {xs.data(), 1, 1}, {one.data(), 1, 1}, false, c.data(), 1);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(c[i], FromBf16(ToBf16(xs[i]))) << xs[i];
  // B as a row (k = 1, n): the two-run packing; A = 1.
  Bf16Gemm(1, n, 1, {one.data(), 1, 1}, {xs.data(), n, 1}, false, c.data(), n);
  for (int64_t j = 0; j < n; ++j) EXPECT_EQ(c[j], FromBf16(ToBf16(xs[j]))) << xs[j];
  // A as one row along the inner dimension (m = 1, k = n) against unit
  // vectors: element p of the result row picks x_p (and no infinity may
  // meet a zero there).
  for (float& x : xs) {
    if (std::isinf(FromBf16(ToBf16(x)))) x = 2.5f;
  }
  std::vector<float> eye(n * n, 0.0f);
  for (int64_t p = 0; p < n; ++p) eye[p * n + p] = 1.0f;
  Bf16Gemm(1, n, n, {xs.data(), n, 1}, {eye.data(), n, 1}, false, c.data(), n);
  for (int64_t j = 0; j < n; ++j) EXPECT_EQ(c[j], FromBf16(ToBf16(xs[j]))) << xs[j];
}

}  // namespace
}  // namespace fmstack::gpt
