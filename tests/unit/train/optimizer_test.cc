#include "train/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace
}  // namespace fmstack::train
