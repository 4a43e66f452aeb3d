// Every CPU kernel's backward against central finite differences of its forward.
#include <gtest/gtest.h>

#include "gpt/cpu_kernels.h"
#include "gpt/sgemm_peak.h"
#include "grad_check.h"

namespace fmstack::gpt {
namespace {

using testing::Dot;
using testing::FillNormal;
using testing::GradientError;
using V = std::vector<float>;

constexpr double kTolerance = 1e-3;

TEST(Kernels, LayerNormBackwardMatchesFiniteDifferences) {
  const int64_t N = 6, C = 20;
  V x(N * C), w(C), b(C), r(N * C), out(N * C), mean(N), rstd(N);
  FillNormal(x, 1), FillNormal(w, 2), FillNormal(b, 3), FillNormal(r, 4);
  auto loss = [&] {
    cpu::LayerNormForward(out, mean, rstd, x, w, b, N, C);
    return Dot(out, r);
  };
  loss();
  V dx(N * C, 0), dw(C, 0), db(C, 0);
  cpu::LayerNormBackwardAccumulate(dx, dw, db, r, x, w, mean, rstd, N, C);
  EXPECT_LT(GradientError(loss, x, dx), kTolerance);
  EXPECT_LT(GradientError(loss, w, dw), kTolerance);
  EXPECT_LT(GradientError(loss, b, db), kTolerance);
}

TEST(Kernels, LayerNormBackwardAccumulatesIntoInputGradient) {
  const int64_t N = 2, C = 8;
  V x(N * C), w(C, 1), b(C, 0), r(N * C), out(N * C), mean(N), rstd(N);
  FillNormal(x, 5), FillNormal(r, 6);
  cpu::LayerNormForward(out, mean, rstd, x, w, b, N, C);
  V fresh(N * C, 0), seeded(N * C, 1), dw(C, 0), db(C, 0);
  cpu::LayerNormBackwardAccumulate(fresh, dw, db, r, x, w, mean, rstd, N, C);
  cpu::LayerNormBackwardAccumulate(seeded, dw, db, r, x, w, mean, rstd, N, C);
  for (size_t i = 0; i < fresh.size(); ++i) EXPECT_FLOAT_EQ(seeded[i], fresh[i] + 1);
}

TEST(Kernels, MatmulBackwardMatchesFiniteDifferences) {
  const int64_t N = 7, C = 12, OC = 9;
  V x(N * C), w(OC * C), b(OC), r(N * OC), out(N * OC);
  FillNormal(x, 1), FillNormal(w, 2), FillNormal(b, 3), FillNormal(r, 4);
  auto loss = [&] {
    cpu::MatmulForward(out, x, w, b, N, C, OC);
    return Dot(out, r);
  };
  V dx(N * C), dw(OC * C, 0), db(OC, 0);
  cpu::MatmulBackward(dx, dw, db, r, x, w, N, C, OC);
  EXPECT_LT(GradientError(loss, x, dx), kTolerance);
  EXPECT_LT(GradientError(loss, w, dw), kTolerance);
  EXPECT_LT(GradientError(loss, b, db), kTolerance);
}

// Column sums (LayerNorm's parameter gradients, the embeddings') split the
// channels across threads, one range each: every channel still sums its rows
// in order, so 1, 2 or 3 threads give the same bits. C is not a multiple of
// the ranges' 16-channel rounding.
TEST(Kernels, ColumnGradientsDoNotDependOnTheThreadCount) {
  const int64_t B = 2, T = 37, N = B * T, C = 100, vocab = 11;
  V x(N * C), w(C), b(C), r(N * C), out(N * C), mean(N), rstd(N);
  FillNormal(x, 1), FillNormal(w, 2), FillNormal(b, 3), FillNormal(r, 4);
  cpu::LayerNormForward(out, mean, rstd, x, w, b, N, C);
  std::vector<int32_t> tokens(N);
  for (int64_t n = 0; n < N; ++n) tokens[n] = static_cast<int32_t>((n * 7) % vocab);
  const int threads = CpuThreads();
  auto run = [&](int t) {
    SetCpuThreads(t);
    V dx(N * C, 0), dw(C, 0.25f), db(C, -0.5f), dwte(vocab * C, 0), dwpe(T * C, 0);
    cpu::LayerNormBackwardAccumulate(dx, dw, db, r, x, w, mean, rstd, N, C);
    cpu::EncoderBackward(dwte, dwpe, r, tokens, B, T, C);
    for (const V* v : {&dw, &db, &dwte, &dwpe}) dx.insert(dx.end(), v->begin(), v->end());
    return dx;
  };
  const V one = run(1), two = run(2), three = run(3);
  SetCpuThreads(threads);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(one[i], two[i]) << i;
    ASSERT_EQ(one[i], three[i]) << i;
  }
}

// Zero splits a buffer across the threads in pieces of at least 1 MiB:
// every element of every piece, the uneven last one included, and nothing
// past the span, whatever the thread count.
TEST(Kernels, ZeroClearsEveryElementOnAnyThreadCount) {
  const int threads = CpuThreads();
  for (const int t : {1, 2, 3}) {
    SetCpuThreads(t);
    for (const size_t n : {size_t{0}, size_t{1}, size_t{1000}, (size_t{3} << 18) + 7}) {
      V x(n + 1, 1.5f);
      cpu::Zero(std::span<float>(x).first(n));
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(x[i], 0.0f) << "threads " << t << ", n " << n;
      EXPECT_EQ(x[n], 1.5f) << "threads " << t << ", n " << n << ": written past the span";
    }
  }
  SetCpuThreads(threads);
}

// On two threads the input and weight gradients run side by side, each
// single-threaded; the result must be the bits of running them in turn on
// one thread.
TEST(Kernels, MatmulBackwardSideBySideEqualsInTurn) {
  const int64_t N = 256, C = 64, OC = 192;
  V x(N * C), w(OC * C), r(N * OC);
  FillNormal(x, 1), FillNormal(w, 2), FillNormal(r, 3);
  const int threads = CpuThreads();
  auto run = [&](int t) {
    SetCpuThreads(t);
    V dx(N * C, 0), dw(OC * C, 0.5f), db(OC, 0);
    cpu::MatmulBackward(dx, dw, db, r, x, w, N, C, OC);
    dx.insert(dx.end(), dw.begin(), dw.end());
    dx.insert(dx.end(), db.begin(), db.end());
    return dx;
  };
  const V in_turn = run(1), side_by_side = run(2);
  SetCpuThreads(threads);
  ASSERT_EQ(in_turn.size(), side_by_side.size());
  for (size_t i = 0; i < in_turn.size(); ++i) ASSERT_EQ(in_turn[i], side_by_side[i]) << i;
}

// The weight gradient runs in blocks of rows (OpenBLAS's packing buffer
// stays small for the LM head); every row, the last partial block's too,
// must be the plain sum over tokens added to what the gradient held.
TEST(Kernels, WeightGradientInBlocksOfRowsIsThePlainSum) {
  const int64_t N = 24, C = 16, OC = 2 * 4096 + 37;
  V x(N * C), w(OC * C), r(N * OC), dx(N * C), dw(OC * C), db;
  FillNormal(x, 1), FillNormal(w, 2), FillNormal(r, 3), FillNormal(dw, 4);
  const V seed = dw;
  cpu::MatmulBackward(dx, dw, db, r, x, w, N, C, OC);
  for (int64_t o = 0; o < OC; ++o) {
    for (int64_t c = 0; c < C; ++c) {
      double sum = seed[o * C + c];
      for (int64_t n = 0; n < N; ++n) sum += double{r[n * OC + o]} * x[n * C + c];
      ASSERT_NEAR(dw[o * C + c], sum, 1e-4 * (1 + std::abs(sum))) << "row " << o << " col " << c;
    }
  }
}

TEST(Kernels, MatmulResidualAddsTheResidual) {
  const int64_t N = 3, C = 4, OC = 5;
  V x(N * C), w(OC * C), b(OC), res(N * OC), plain(N * OC), with(N * OC);
  FillNormal(x, 1), FillNormal(w, 2), FillNormal(b, 3), FillNormal(res, 4);
  cpu::MatmulForward(plain, x, w, b, N, C, OC);
  cpu::MatmulResidualForward(with, res, x, w, b, N, C, OC);
  for (size_t i = 0; i < with.size(); ++i) EXPECT_NEAR(with[i], plain[i] + res[i], 1e-5);
}

TEST(Kernels, AttentionBackwardMatchesFiniteDifferences) {
  const int64_t B = 2, T = 5, C = 8, NH = 2;
  V qkv(B * T * 3 * C), r(B * T * C), out(B * T * C), att(B * NH * T * T);
  FillNormal(qkv, 1), FillNormal(r, 2);
  auto loss = [&] {
    cpu::AttentionForward(out, att, qkv, B, T, C, NH);
    return Dot(out, r);
  };
  loss();
  V dqkv(qkv.size()), scratch(att.size());
  cpu::AttentionBackward(dqkv, scratch, r, qkv, att, B, T, C, NH);
  EXPECT_LT(GradientError(loss, qkv, dqkv), kTolerance);
}

TEST(Kernels, AttentionIsCausal) {
  const int64_t B = 1, T = 4, C = 4, NH = 1;
  V qkv(T * 3 * C), out(T * C), att(T * T);
  FillNormal(qkv, 7);
  cpu::AttentionForward(out, att, qkv, B, T, C, NH);
  const V first_row(out.begin(), out.begin() + C);
  qkv[3 * 3 * C + 2 * C] += 5.0f;  // change the last token's value vector
  cpu::AttentionForward(out, att, qkv, B, T, C, NH);
  for (int64_t c = 0; c < C; ++c) EXPECT_EQ(out[c], first_row[c]);
  for (int64_t i = 0; i < T; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < T; ++j) sum += att[i * T + j];
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

TEST(Kernels, GeluBackwardMatchesFiniteDifferences) {
  V x(300), r(300), out(300);
  FillNormal(x, 1, 2.0f), FillNormal(r, 2);
  auto loss = [&] {
    cpu::GeluForward(out, x);
    return Dot(out, r);
  };
  V d = r;
  cpu::GeluBackwardInPlace(d, x);
  EXPECT_LT(GradientError(loss, x, d, 1e-3f), kTolerance);
}

// The fused pass gives GELU's input gradient of the plain pass (to rounding:
// where a value falls in a vector or in a loop's scalar remainder moves its
// last bit under -ffast-math), and the bias gradient as the sum of those
// values over rows in order, bit for bit, on 1, 2 or 3 threads. F is not a
// multiple of the channel ranges' 16-channel rounding.
TEST(Kernels, GeluBackwardWithBiasGradientIsThePlainPassThenColumnSums) {
  const int64_t N = 67, F = 150;
  V x(N * F), r(N * F), seed(F);
  FillNormal(x, 1, 2.0f), FillNormal(r, 2), FillNormal(seed, 3);
  V plain = r;
  cpu::GeluBackwardInPlace(plain, x);
  const int threads = CpuThreads();
  for (const int t : {1, 2, 3}) {
    SetCpuThreads(t);
    V d = r, bias = seed;
    cpu::GeluBackwardWithBiasGradient(d, bias, x, N, F);
    V sums = seed;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t k = 0; k < F; ++k) sums[k] += d[n * F + k];
    }
    for (size_t i = 0; i < d.size(); ++i)
      ASSERT_NEAR(d[i], plain[i], 1e-6f * (1.0f + std::abs(plain[i]))) << t << " threads, " << i;
    for (int64_t k = 0; k < F; ++k) ASSERT_EQ(bias[k], sums[k]) << t << " threads, " << k;
  }
  SetCpuThreads(threads);
}

TEST(Kernels, SoftmaxCrossEntropyBackwardMatchesFiniteDifferences) {
  const int64_t N = 4, Vocab = 11;
  V logits(N * Vocab), probs(N * Vocab), losses(N);
  FillNormal(logits, 1);
  const std::vector<int32_t> targets = {3, 0, 10, 3};
  auto loss = [&] {
    probs = logits;
    cpu::SoftmaxCrossEntropyForward(probs, losses, targets, N, Vocab);
    double s = 0;
    for (float l : losses) s += l;
    return s / N;
  };
  loss();
  cpu::SoftmaxCrossEntropyBackwardInPlace(probs, targets, N, Vocab, 1.0f);
  const V analytic = probs;  // loss() below overwrites probs
  EXPECT_LT(GradientError(loss, logits, analytic), kTolerance);
}

TEST(Kernels, EncoderBackwardMatchesFiniteDifferences) {
  const int64_t B = 2, T = 3, C = 4, Vocab = 5;
  V wte(Vocab * C), wpe(T * C), r(B * T * C), out(B * T * C);
  FillNormal(wte, 1), FillNormal(wpe, 2), FillNormal(r, 3);
  const std::vector<int32_t> tokens = {1, 4, 1, 0, 1, 2};  // repeats must accumulate
  auto loss = [&] {
    cpu::EncoderForward(out, tokens, wte, wpe, B, T, C);
    return Dot(out, r);
  };
  V dwte(wte.size(), 0), dwpe(wpe.size(), 0);
  cpu::EncoderBackward(dwte, dwpe, r, tokens, B, T, C);
  EXPECT_LT(GradientError(loss, wte, dwte), kTolerance);
  EXPECT_LT(GradientError(loss, wpe, dwpe), kTolerance);
}

}  // namespace
}  // namespace fmstack::gpt
