// The fast kernels against their plain forms (gpt/reference_kernels.h), with
// the tolerances gpt/fast_math.h states.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "gpt/cpu_kernels.h"
#include "gpt/fast_math.h"
#include "gpt/reference_kernels.h"

namespace fmstack::gpt {
namespace {

using V = std::vector<float>;

TEST(FastMath, ExpWithinTwoTenMillionthsOfStdExp) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.001f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(ExpFast(x) - want) / want);
  }
  EXPECT_LT(worst, 2e-7);
}

TEST(FastMath, ExpClampsAndKeepsNaN) {
  EXPECT_EQ(ExpFast(-std::numeric_limits<float>::infinity()), ExpFast(-87.0f));
  EXPECT_EQ(ExpFast(1000.0f), ExpFast(88.0f));
  EXPECT_TRUE(std::isfinite(ExpFast(88.0f)));
  EXPECT_TRUE(std::isnan(ExpFast(std::numeric_limits<float>::quiet_NaN())));
}

// Inputs across GELU's whole useful range, a NaN among them.
V GeluInputs() {
  V x;
  for (float v = -12.0f; v <= 12.0f; v += 0.0037f) x.push_back(v);
  return x;
}

TEST(FastKernels, GeluForwardMatchesTheTanhForm) {
  const V x = GeluInputs();
  V fast(x.size()), plain(x.size());
  cpu::GeluForward(fast, x);
  cpu::reference::GeluForward(plain, x);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(fast[i], plain[i], 1e-6f * (1.0f + std::abs(x[i]))) << "x = " << x[i];
}

TEST(FastKernels, GeluBackwardMatchesTheTanhForm) {
  const V x = GeluInputs();
  V fast(x.size(), 1.5f), plain(x.size(), 1.5f);
  cpu::GeluBackwardInPlace(fast, x);
  cpu::reference::GeluBackwardInPlace(plain, x);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(fast[i], plain[i], 2e-6f * (1.0f + std::abs(x[i]))) << "x = " << x[i];
}

TEST(FastKernels, GeluPropagatesNaN) {
  const V x = {1.0f, std::numeric_limits<float>::quiet_NaN(), -1.0f};
  V out(3), d(3, 1.0f);
  cpu::GeluForward(out, x);
  cpu::GeluBackwardInPlace(d, x);
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_TRUE(std::isnan(d[1]));
  EXPECT_FALSE(std::isnan(out[0]) || std::isnan(out[2]));
}

TEST(FastKernels, CrossEntropySoftmaxMatchesStdExpInDouble) {
  const int64_t N = 3, Vocab = 1000;
  V logits(N * Vocab);
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = 8.0f * std::sin(0.37f * static_cast<float>(i)) - 0.01f * static_cast<float>(i % 97);
  V plain = logits, losses(N);
  const std::vector<int32_t> targets = {5, 999, 0};
  cpu::SoftmaxCrossEntropyForward(logits, losses, targets, N, Vocab);
  for (int64_t n = 0; n < N; ++n) {
    cpu::reference::SoftmaxInPlace(std::span<float>(plain).subspan(n * Vocab, Vocab));
    for (int64_t v = 0; v < Vocab; ++v) {
      const float want = plain[n * Vocab + v];
      ASSERT_NEAR(logits[n * Vocab + v], want, 1e-6f * want + 1e-12f) << n << ", " << v;
    }
    const double loss = -std::log(plain[n * Vocab + targets[n]]);
    EXPECT_NEAR(losses[n], loss, 1e-6 * std::max(1.0, loss));
  }
}

TEST(FastKernels, CrossEntropyOfANaNLogitIsNaN) {
  V logits = {0.5f, std::numeric_limits<float>::quiet_NaN(), 0.1f, 0.2f};
  V losses(1);
  const std::vector<int32_t> targets = {0};
  cpu::SoftmaxCrossEntropyForward(logits, losses, targets, 1, 4);
  EXPECT_TRUE(std::isnan(losses[0]));
}

TEST(FastKernels, AttentionProbabilitiesMatchStdExpInDouble) {
  const int64_t B = 1, T = 37, C = 16, NH = 2, hs = C / NH;
  V qkv(B * T * 3 * C), out(B * T * C), att(B * NH * T * T);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = std::cos(0.11f * static_cast<float>(i)) * 3.0f;
  cpu::AttentionForward(out, att, qkv, B, T, C, NH);
  for (int64_t h = 0; h < NH; ++h) {
    for (int64_t i = 0; i < T; ++i) {
      V row(i + 1);
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0;
        for (int64_t k = 0; k < hs; ++k)
          s += static_cast<double>(qkv[i * 3 * C + h * hs + k]) * qkv[j * 3 * C + C + h * hs + k];
        row[j] = static_cast<float>(s / std::sqrt(static_cast<double>(hs)));
      }
      cpu::reference::SoftmaxInPlace(row);
      for (int64_t j = 0; j < T; ++j) {
        const float got = att[(h * T + i) * T + j];
        ASSERT_NEAR(got, j <= i ? row[j] : 0.0f, 2e-6f) << "head " << h << " row " << i;
      }
    }
  }
}

// T values around the block size: one partial block, exact blocks, a tail.
class BlockedAttention : public ::testing::TestWithParam<int64_t> {};

TEST_P(BlockedAttention, MatchesThePlainLoops) {
  const int64_t B = 2, T = GetParam(), C = 24, NH = 3;
  V qkv(B * T * 3 * C), dout(B * T * C);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = std::sin(0.7f * static_cast<float>(i)) * 1.5f;
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = std::cos(0.3f * static_cast<float>(i));
  V out(B * T * C), att(B * NH * T * T), scratch(att.size()), dqkv(qkv.size(), 7.0f);
  V ref_out(out.size()), ref_att(att.size()), ref_dqkv(qkv.size());
  cpu::AttentionForward(out, att, qkv, B, T, C, NH);
  cpu::AttentionBackward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
  cpu::reference::AttentionForward(ref_out, ref_att, qkv, B, T, C, NH);
  cpu::reference::AttentionBackward(ref_dqkv, dout, qkv, ref_att, B, T, C, NH);
  for (size_t i = 0; i < att.size(); ++i) ASSERT_NEAR(att[i], ref_att[i], 1e-6f) << i;
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref_out[i], 1e-5f) << i;
  for (size_t i = 0; i < dqkv.size(); ++i) ASSERT_NEAR(dqkv[i], ref_dqkv[i], 1e-5f) << i;
}

INSTANTIATE_TEST_SUITE_P(T, BlockedAttention, ::testing::Values(1, 5, 64, 65, 128, 200));

}  // namespace
}  // namespace fmstack::gpt
