#include "train/optimizer.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

namespace fmstack::train {
namespace {

TEST(Schedule, WarmsUpLinearlyThenDecaysToTheFloor) {
  OptimConfig c;
  c.lr = 1e-3, c.min_lr = 1e-4, c.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(LearningRate(c, 0, 100), 1e-4);
  EXPECT_DOUBLE_EQ(LearningRate(c, 9, 100), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRate(c, 10, 100), 1e-3);
  EXPECT_NEAR(LearningRate(c, 55, 100), 0.5 * (1e-3 + 1e-4), 1e-12);  // halfway down the cosine
  EXPECT_DOUBLE_EQ(LearningRate(c, 100, 100), 1e-4);
}

// The norm's plain form: blocks of 2^16, eight lanes a block each summing
// its elements in order, then the lanes and the blocks in order. GlobalNorm
// runs two blocks at a time where both are full; it must give these bits on
// any thread count, with an odd number of blocks, a short last block, or
// one short block alone.
double PlainBlockedNorm(const std::vector<float>& g) {
  constexpr size_t kBlock = size_t{1} << 16, kLanes = 8;
  double total = 0;
  for (size_t begin = 0; begin < g.size(); begin += kBlock) {
    const size_t end = std::min(g.size(), begin + kBlock);
    double lane[kLanes] = {};
    for (size_t i = begin; i < end; ++i) {
      lane[(i - begin) % kLanes] += static_cast<double>(g[i]) * g[i];
    }
    double s = 0;
    for (const double v : lane) s += v;
    total += s;
  }
  return std::sqrt(total);
}

TEST(Clip, GlobalNormHasThePlainBlockedSumsBitsOnAnyThreadCount) {
  constexpr size_t kBlock = size_t{1} << 16;
  const int threads = omp_get_max_threads();
  for (const size_t n : {size_t{0}, size_t{5}, kBlock - 3, kBlock, 2 * kBlock, 2 * kBlock + 9,
                         3 * kBlock, 4 * kBlock + kBlock / 2 + 1}) {
    std::vector<float> g(n);
    for (size_t i = 0; i < n; ++i) g[i] = std::sin(0.37f * static_cast<float>(i)) * 1e-3f;
    const double plain = PlainBlockedNorm(g);
    for (const int t : {1, 2, 3}) {
      omp_set_num_threads(t);
      EXPECT_EQ(GlobalNorm(g), plain) << n << " elements, " << t << " threads";
    }
  }
  omp_set_num_threads(threads);
}

TEST(Clip, ScalesToTheMaximumNorm) {
  std::vector<float> g = {3, 4};
  EXPECT_DOUBLE_EQ(GlobalNorm(g), 5.0);
  ClipByGlobalNorm(g, 5.0, 1.0);
  EXPECT_NEAR(GlobalNorm(g), 1.0, 1e-6);
  ClipByGlobalNorm(g, GlobalNorm(g), 2.0);  // under the limit: untouched
  EXPECT_NEAR(g[0], 0.6, 1e-6);
}

TEST(AdamW, FirstStepMovesByLrAndDecaysOnlyMatrices) {
  workload::TransformerShape s;
  s.name = "t", s.layers = 1, s.hidden = 4, s.heads = 1, s.kv_heads = 1, s.ffn_hidden = 8;
  s.vocab = 5, s.seq_len = 2;
  const gpt::ParamLayout layout = gpt::ParamLayout::For(s);
  OptimConfig c;
  c.weight_decay = 0.5;
  AdamW opt(c, layout);
  std::vector<float> p(layout.total, 1.0f), g(layout.total, 0.0f);
  g[layout.wte] = 2.0f;    // a matrix entry with gradient
  g[layout.ln1b] = -3.0f;  // a bias with gradient
  opt.Update(p, g, 1, 0.01);
  // Bias-corrected first step: m_hat / sqrt(v_hat) = sign(g).
  EXPECT_NEAR(p[layout.wte], 1.0f - 0.01f * (1.0f + 0.5f), 1e-6);
  EXPECT_NEAR(p[layout.ln1b], 1.0f + 0.01f, 1e-6);
  EXPECT_NEAR(p[layout.wte + 1], 1.0f - 0.01f * 0.5f, 1e-6);  // decay alone
  EXPECT_FLOAT_EQ(p[layout.ln1w], 1.0f);                      // no grad, no decay
}

// Parameters in a sawtooth: step * (i % period) + offset.
std::vector<float> Sawtooth(int64_t n, float step, int64_t period, float offset) {
  std::vector<float> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = step * static_cast<float>(i % period) + offset;
  return p;
}

// Weight decay on every element but those with i % period == skip.
std::vector<uint8_t> DecayMaskEvery(int64_t n, int64_t period, int64_t skip) {
  std::vector<uint8_t> decay(n);
  for (int64_t i = 0; i < n; ++i) decay[i] = static_cast<uint8_t>(i % period != skip);
  return decay;
}

// The training step hands the clip factor to AdamW instead of scaling the
// gradients first; the plain form (ClipByGlobalNorm, then the update) stays
// as the reference, and the two must agree bit for bit over several steps.
TEST(AdamW, ClippingInsideTheUpdateMatchesClippingFirst) {
  const int64_t n = 1000;  // not a multiple of any vector width
  OptimConfig c;
  c.weight_decay = 0.1;
  c.grad_clip = 0.5;
  std::vector<float> p_fused = Sawtooth(n, 0.01f, 97, -0.4f), p_ref = p_fused;
  std::vector<float> m_fused(n, 0), v_fused(n, 0), m_ref(n, 0), v_ref(n, 0);
  const std::vector<uint8_t> decay = DecayMaskEvery(n, 3, 0);
  for (int64_t step = 1; step <= 4; ++step) {
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i)
      g[i] = std::sin(0.37f * static_cast<float>(i * step)) * static_cast<float>(step);
    const double norm = GlobalNorm(g);
    const float scale = ClipScale(norm, c.grad_clip);
    ASSERT_LT(scale, 1.0f) << "the test means to clip";
    AdamWKernel(c, p_fused.data(), g.data(), m_fused.data(), v_fused.data(), decay.data(), n, step,
                1e-3, scale);
    std::vector<float> clipped = g;
    EXPECT_EQ(ClipByGlobalNorm(clipped, norm, c.grad_clip), scale);
    AdamWKernel(c, p_ref.data(), clipped.data(), m_ref.data(), v_ref.data(), decay.data(), n, step,
                1e-3);
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(p_fused[i], p_ref[i]) << i;
    ASSERT_EQ(m_fused[i], m_ref[i]) << i;
    ASSERT_EQ(v_fused[i], v_ref[i]) << i;
  }
}

// AdamWKernel is compiled to vectorize (its own flags in CMakeLists.txt, the
// weight-decay choice written as a bit mask); this is the plain loop it
// replaces, written the obvious way. They agree to a few ulps (the vector
// build may fuse multiply-adds), and the masked choice keeps what the
// branch did with an infinite parameter that takes no decay.
void PlainAdamW(const OptimConfig& c, float* p, const float* g, float* m, float* v,
                const uint8_t* decay, int64_t n, int64_t step, double lr) {
  const double t = static_cast<double>(step);
  const auto b1 = static_cast<float>(c.beta1), b2 = static_cast<float>(c.beta2);
  const auto c1 = static_cast<float>(1.0 - std::pow(c.beta1, t));
  const auto c2 = static_cast<float>(1.0 - std::pow(c.beta2, t));
  for (int64_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    const float update = (m[i] / c1) / (std::sqrt(v[i] / c2) + static_cast<float>(c.eps));
    if (decay[i]) {
      p[i] -= static_cast<float>(lr) * (update + static_cast<float>(c.weight_decay) * p[i]);
    } else {
      p[i] -= static_cast<float>(lr) * update;
    }
  }
}

TEST(AdamW, VectorizedKernelAgreesWithThePlainLoop) {
  const int64_t n = 1003;  // not a multiple of any vector width
  OptimConfig c;
  c.weight_decay = 0.1;
  std::vector<float> p = Sawtooth(n, 0.013f, 89, -0.5f), p_ref = p;
  std::vector<float> m(n, 0), v(n, 0), m_ref(n, 0), v_ref(n, 0);
  const std::vector<uint8_t> decay = DecayMaskEvery(n, 4, 1);
  p[5] = p_ref[5] = std::numeric_limits<float>::infinity();  // decay[5] == 0
  ASSERT_EQ(decay[5], 0);
  for (int64_t step = 1; step <= 5; ++step) {
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = std::cos(0.21f * static_cast<float>(i + 7 * step));
    AdamWKernel(c, p.data(), g.data(), m.data(), v.data(), decay.data(), n, step, 3e-3);
    PlainAdamW(c, p_ref.data(), g.data(), m_ref.data(), v_ref.data(), decay.data(), n, step, 3e-3);
  }
  EXPECT_EQ(p[5], std::numeric_limits<float>::infinity()) << "no decay: inf stays inf, not NaN";
  for (int64_t i = 0; i < n; ++i) {
    if (i == 5) continue;
    // m sums terms that cancel, so a fused multiply-add moves it by ulps
    // of the terms (g is within 1), not of the result: absolute bounds.
    ASSERT_NEAR(p[i], p_ref[i], 1e-6f) << i;
    ASSERT_NEAR(m[i], m_ref[i], 1e-7f) << i;
    ASSERT_NEAR(v[i], v_ref[i], 1e-6f * v_ref[i]) << i;  // positive terms: relative
  }
}

// ZeRO updates each rank's shard on its own, so an element's update must
// not depend on where its range starts (vector body or scalar remainder).
TEST(AdamW, AnElementsUpdateDoesNotDependOnItsRange) {
  const int64_t n = 517;
  OptimConfig c;
  c.weight_decay = 0.1;
  const std::vector<float> p0 = Sawtooth(n, 0.011f, 53, -0.25f);
  const std::vector<uint8_t> decay = DecayMaskEvery(n, 5, 0);
  std::vector<float> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = std::sin(0.7f * static_cast<float>(i)) * 0.3f;
  std::vector<float> whole = p0, m(n, 0), v(n, 0);
  AdamWKernel(c, whole.data(), g.data(), m.data(), v.data(), decay.data(), n, 3, 1e-3);
  for (const int64_t cut : {1, 3, 5, 7, 13, 200}) {
    std::vector<float> split = p0, ms(n, 0), vs(n, 0);
    AdamWKernel(c, split.data(), g.data(), ms.data(), vs.data(), decay.data(), cut, 3, 1e-3);
    AdamWKernel(c, split.data() + cut, g.data() + cut, ms.data() + cut, vs.data() + cut,
                decay.data() + cut, n - cut, 3, 1e-3);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(split[i], whole[i]) << "cut " << cut << ", " << i;
  }
}

// AdamW keeps the decay choice as ranges of tensors; ZeRO's shards keep it
// per element. The two forms must cover every parameter once, agree with
// DecayMask, and give the same bits (resumed and re-sharded runs rely on it).
TEST(AdamW, DecayRangesGiveTheBitsOfThePerParameterMask) {
  workload::TransformerShape s;
  s.name = "t", s.layers = 3, s.hidden = 16, s.heads = 2, s.kv_heads = 2, s.ffn_hidden = 64;
  s.vocab = 37, s.seq_len = 8;
  const gpt::ParamLayout layout = gpt::ParamLayout::For(s);
  const std::vector<uint8_t> mask = DecayMask(layout);
  const std::vector<DecayRange> ranges = DecayRanges(layout);
  int64_t next = 0;
  for (const DecayRange& r : ranges) {
    ASSERT_EQ(r.begin, next);
    for (int64_t i = r.begin; i < r.begin + r.count; ++i) ASSERT_EQ(mask[i] != 0, r.decay) << i;
    next = r.begin + r.count;
  }
  ASSERT_EQ(next, layout.total);
  ASSERT_GT(ranges.size(), 2u);  // matrices and vectors alternate

  const int64_t n = layout.total;
  OptimConfig c;
  c.weight_decay = 0.1;
  const std::vector<float> p0 = Sawtooth(n, 0.013f, 29, -0.2f);
  std::vector<float> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = std::cos(0.37f * static_cast<float>(i)) * 0.2f;
  std::vector<float> masked = p0, mm(n, 0), vm(n, 0), ranged = p0, mr(n, 0), vr(n, 0);
  for (int64_t step = 1; step <= 3; ++step) {
    AdamWKernel(c, masked.data(), g.data(), mm.data(), vm.data(), mask.data(), n, step, 1e-3, 0.5f);
    AdamWRanges(c, ranged.data(), g.data(), mr.data(), vr.data(), ranges, step, 1e-3, 0.5f);
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(ranged[i], masked[i]) << i;
    ASSERT_EQ(mr[i], mm[i]) << i;
    ASSERT_EQ(vr[i], vm[i]) << i;
  }
}

}  // namespace
}  // namespace fmstack::train
