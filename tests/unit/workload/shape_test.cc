#include "workload/shape.h"

#include <gtest/gtest.h>

#include "workload/presets.h"

namespace fmstack::workload {
namespace {

int64_t Total(const char* preset) {
  return CountParams(*FindPreset(preset)).total;
}

TEST(ParamCount, Gpt2FamilyMatchesPublishedCounts) {
  EXPECT_EQ(Total("gpt2-124m"), 124'439'808);
  EXPECT_EQ(Total("gpt2-355m"), 354'823'168);
  EXPECT_EQ(Total("gpt2-774m"), 774'030'080);
  EXPECT_EQ(Total("gpt2-1.5b"), 1'557'611'200);
}

TEST(ParamCount, LlamaFamilyMatchesPublishedCounts) {
  EXPECT_EQ(Total("llama2-7b"), 6'738'415'616);
  EXPECT_EQ(Total("llama2-13b"), 13'015'864'320);
  EXPECT_EQ(Total("llama2-70b"), 68'976'648'192);
  EXPECT_EQ(Total("llama3-8b"), 8'030'261'248);
  EXPECT_EQ(Total("llama3-70b"), 70'553'706'496);
  EXPECT_EQ(Total("llama3.1-405b"), 405'853'388'800);
}

// PaLM 540B's heads (48 of 256) are narrower than its hidden size (18432),
// so Q and O are 18432 x 12288; with d x d they would count 562B.
TEST(ParamCount, PalmHeadsNarrowerThanHiddenMatchPublishedCount) {
  TransformerShape s;
  s.layers = 118, s.hidden = 18432, s.heads = 48, s.kv_heads = 1, s.explicit_head_dim = 256;
  s.ffn_hidden = 73728, s.vocab = 256000, s.seq_len = 2048;
  s.mlp = MlpKind::kSwiGlu, s.position = PositionKind::kRope, s.bias = false;
  ASSERT_FALSE(s.FindProblem());
  EXPECT_EQ(s.q_dim(), 12288);
  const double total = static_cast<double>(CountParams(s).total);
  EXPECT_NEAR(total / 540.35e9, 1.0, 0.001);  // PaLM's Table 1: 540.35B
  // Attention FLOPs follow the heads' width, not the hidden size.
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(s).attention, 12.0 * 118 * 2048 * 12288);
  s.explicit_head_dim = 0;
  EXPECT_EQ(s.q_dim(), 18432);
  EXPECT_GT(static_cast<double>(CountParams(s).total), 560e9);
}

TEST(ParamCount, MixtralTotalAndActive) {
  const ParamCounts c = CountParams(*FindPreset("mixtral-8x7b"));
  EXPECT_EQ(c.total, 46'702'792'704);  // Mistral's model card: 46.7B
  // 12.9B active with top-2 routing: the total less 6 idle experts per layer.
  EXPECT_EQ(c.active, c.total - 32LL * 6 * 3 * 4096 * 14336);
  EXPECT_EQ(c.active, 12'879'925'248);
  EXPECT_EQ(c.expert, c.mlp);
  EXPECT_EQ(c.router, 32 * 4096 * 8);
}

TEST(ParamCount, PartsAddUp) {
  for (const std::string& name : PresetNames()) {
    const ParamCounts c = CountParams(*FindPreset(name));
    EXPECT_EQ(c.total, c.embedding + c.lm_head + c.attention + c.mlp + c.router + c.norms) << name;
    EXPECT_LE(c.active, c.total) << name;
  }
}

TEST(ParamCount, TiedHeadCostsNothingUntiedCostsVocabTimesHidden) {
  TransformerShape s = *FindPreset("gpt2-124m");
  const int64_t tied = CountParams(s).total;
  s.tied_embeddings = false;
  EXPECT_EQ(CountParams(s).total - tied, 50257 * 768);
}

TEST(Flops, SixNIsSixTimesActiveParams) {
  const TransformerShape s = *FindPreset("llama3-8b");
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(s).six_n, 6.0 * 8'030'261'248);
  const TransformerShape moe = *FindPreset("mixtral-8x7b");
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(moe).six_n,
                   6.0 * static_cast<double>(CountParams(moe).active));
}

TEST(Flops, DetailedMatchesMegatronFormulaForGpt) {
  // Korthikanti et al. 2022 (model FLOPs, no recompute): F = 72 B s l h^2
  // (1 + s/(6h) + V/(12 l h)) per iteration, i.e. per token 72 l h^2 (...).
  TransformerShape s = *FindPreset("gpt2-1.5b");
  s.bias = false;
  s.position = PositionKind::kRope;  // the formula counts no position table
  const double l = 48, h = 1600, seq = 1024, v = 50257;
  const double megatron = 72 * l * h * h * (1 + seq / (6 * h) + v / (12 * l * h));
  EXPECT_NEAR(TrainingFlopsPerToken(s).detailed / megatron, 1.0, 1e-12);
}

TEST(Mfu, RoundTripsHours) {
  const double flops = 6.0 * 70e9 * 1.4e12;
  const double hours = AcceleratorHours(flops, 1e15, 0.4);
  EXPECT_NEAR(ImpliedMfu(flops, 1e15, hours), 0.4, 1e-12);
  EXPECT_NEAR(Mfu(1000.0, 6e9, 2.0, 1e13), 0.3, 1e-12);
}

TEST(Shape, ProblemsNameTheKey) {
  TransformerShape s = *FindPreset("gpt2-124m");
  EXPECT_FALSE(s.FindProblem().has_value());
  s.heads = 7;
  ASSERT_TRUE(s.FindProblem().has_value());
  EXPECT_EQ(s.FindProblem()->key, "heads");
  s = *FindPreset("llama3-8b");
  s.kv_heads = 5;
  EXPECT_EQ(s.FindProblem()->key, "kv_heads");
  s = *FindPreset("mixtral-8x7b");
  s.active_experts = 9;
  EXPECT_EQ(s.FindProblem()->key, "active_experts");
}

}  // namespace
}  // namespace fmstack::workload
