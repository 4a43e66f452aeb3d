#include "workload/memory.h"

#include <gtest/gtest.h>

#include "workload/presets.h"

namespace fmstack::workload {
namespace {

TEST(StateBytes, Conventions) {
  EXPECT_EQ(Bf16Everything().per_param(), 8);
  EXPECT_EQ(MixedPrecision().per_param(), 16);
  EXPECT_EQ(Fp32().per_param(), 16);
  EXPECT_EQ(Bf16Everything().checkpoint_per_param(), 6);
  EXPECT_EQ(MixedPrecision().checkpoint_per_param(), 14);
}

TEST(Memory, ZeroStagesShardOverDataParallel) {
  const TransformerShape s = *FindPreset("llama2-7b");
  const double n = static_cast<double>(CountParams(s).total);
  Layout l;
  l.dp = 8;
  ActivationOptions a;
  a.recompute = Recompute::kFull;
  const StateBytes b = MixedPrecision();
  l.zero_stage = 0;
  const MemoryBreakdown z0 = PerAccelerator(s, b, l, a);
  EXPECT_DOUBLE_EQ(z0.state(), 16 * n);
  l.zero_stage = 1;
  EXPECT_DOUBLE_EQ(PerAccelerator(s, b, l, a).state(), 4 * n + 12 * n / 8);
  l.zero_stage = 2;
  EXPECT_DOUBLE_EQ(PerAccelerator(s, b, l, a).state(), 2 * n + 14 * n / 8);
  l.zero_stage = 3;
  EXPECT_DOUBLE_EQ(PerAccelerator(s, b, l, a).state(), 16 * n / 8);
}

TEST(Memory, ModelParallelSplitsWeights) {
  const TransformerShape s = *FindPreset("llama3-70b");
  Layout l;
  l.tp = 8;
  l.pp = 4;
  const MemoryBreakdown m = PerAccelerator(s, MixedPrecision(), l, {});
  EXPECT_DOUBLE_EQ(m.params, 2.0 * static_cast<double>(CountParams(s).total) / 32);
}

TEST(Activations, KorthikantiGptFormula) {
  // GPT with 4h MLP, no flash attention, no recompute, no TP: 34sbh + 5as^2b.
  TransformerShape s = *FindPreset("gpt2-1.5b");
  ActivationOptions a;
  a.micro_batch = 2;
  a.flash_attention = false;
  a.recompute = Recompute::kNone;
  const double sq = 1024, b = 2, h = 1600, heads = 25;
  EXPECT_DOUBLE_EQ(ActivationBytesPerLayer(s, {}, a), sq * b * h * 34 + 5 * heads * sq * sq * b);
  // TP = 4 without sequence parallelism: sbh(10 + 24/t + 5as/(ht)).
  Layout tp;
  tp.tp = 4;
  a.sequence_parallel = false;
  EXPECT_DOUBLE_EQ(ActivationBytesPerLayer(s, tp, a),
                   sq * b * h * (10 + 24.0 / 4 + 5 * heads * sq / (h * 4)));
  // With sequence parallelism everything splits: sbh(34/t + 5as/(ht)).
  a.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(ActivationBytesPerLayer(s, tp, a),
                   sq * b * h * (34.0 / 4 + 5 * heads * sq / (h * 4)));
  // Full recompute keeps the layer input only.
  a.recompute = Recompute::kFull;
  EXPECT_DOUBLE_EQ(ActivationBytesPerLayer(s, tp, a), 2 * sq * b * h / 4);
}

TEST(Activations, FlashAttentionDropsTheQuadraticTerm) {
  TransformerShape s = *FindPreset("llama3-8b");
  ActivationOptions a;
  a.flash_attention = false;
  a.recompute = Recompute::kNone;
  const double without = ActivationBytesPerLayer(s, {}, a);
  a.flash_attention = true;
  const double with = ActivationBytesPerLayer(s, {}, a);
  EXPECT_LT(with, without / 4);
}

TEST(MinDevices, ExactFitIsNotRoundedUp) {
  EXPECT_EQ(MinDevices(560e9, 80e9), 7);
  EXPECT_EQ(MinDevices(560e9 + 1, 80e9), 8);
  EXPECT_EQ(MinDevices(1, 80e9), 1);
}

}  // namespace
}  // namespace fmstack::workload
