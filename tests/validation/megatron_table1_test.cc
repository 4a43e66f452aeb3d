// Megatron-LM on Selene (Narayanan et al., SC'21, Table 1): ten GPT models
// from 1.7B on 32 A100 to 1T on 3,072 A100, with the TFLOP/s per GPU they
// achieved. The step model, with its default efficiencies and the 2021
// software (no flash attention, no sequence parallelism, full recompute),
// must land within 10% of each.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "catalog/catalog.h"
#include "sim/step_model.h"
#include "spec/job_spec.h"

namespace fmstack::sim {
namespace {

struct Row {
  double billions;
  int heads, hidden, layers, tp, pp, gpus, batch;
  double published_tflops;
};

constexpr Row kTable1[] = {
    {1.7, 24, 2304, 24, 1, 1, 32, 512, 137},
    {3.6, 32, 3072, 30, 2, 1, 64, 512, 138},
    {7.5, 32, 4096, 36, 4, 1, 128, 512, 142},
    {18.4, 48, 6144, 40, 8, 1, 256, 1024, 135},
    {39.1, 64, 8192, 48, 8, 2, 512, 1536, 138},
    {76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140},
    {145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148},
    {310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155},
    {529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163},
    {1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163},
};

spec::JobSpec Job(const Row& r, const catalog::Catalog& cat) {
  return spec::ParseJobSpec(fmt::format(R"(
[model]
name = "gpt-{}b"
layers = {}
hidden = {}
heads = {}
kv_heads = {}
ffn_hidden = {}
vocab = 51200
seq_len = 2048
mlp = "gelu"
norm = "layernorm"
position = "learned"
tied_embeddings = true
[train]
precision = "bf16"
recompute = "full"
flash_attention = false
micro_batch = 1
global_batch = {}
[parallel]
tp = {}
pp = {}
[cluster]
instance = "dgx-a100"
nodes = {}
)",
                                        r.billions, r.layers, r.hidden, r.heads, r.heads,
                                        4 * r.hidden, r.batch, r.tp, r.pp, r.gpus / 8),
                            "megatron.toml", cat);
}

TEST(MegatronTable1, TflopsPerGpuWithinTenPercentOfPublished) {
  const catalog::Catalog cat = catalog::Catalog::LoadEmbedded();
  StepOptions options;
  options.sequence_parallel = false;  // came in 2022
  double worst = 0;
  for (const Row& r : kTable1) {
    const spec::JobSpec job = Job(r, cat);
    const StepTime t =
        ModelStep(job, BuildTopology(*job.cluster), job.cluster->accelerator, options);
    // Parameter count check: the shape is the paper's model.
    const double params = static_cast<double>(workload::CountParams(job.model).total) / 1e9;
    EXPECT_NEAR(params, r.billions, 0.03 * r.billions) << r.billions << "B";
    const double ratio = t.tflops_per_accelerator / r.published_tflops;
    worst = std::max(worst, std::abs(ratio - 1));
    EXPECT_NEAR(ratio, 1.0, 0.10) << fmt::format(
        "{}B on {} GPUs: model {:.1f} TFLOP/s, published {}", r.billions, r.gpus,
        t.tflops_per_accelerator, r.published_tflops);
    EXPECT_TRUE(t.fits) << r.billions << "B";
  }
  RecordProperty("worst_relative_error", fmt::format("{:.3f}", worst));
}

TEST(MegatronTable1, BiggerModelsAchieveMoreBecauseElementwiseWorkShrinks) {
  const catalog::Catalog cat = catalog::Catalog::LoadEmbedded();
  StepOptions options;
  options.sequence_parallel = false;
  const spec::JobSpec small = Job(kTable1[0], cat), big = Job(kTable1[9], cat);
  const StepTime a =
      ModelStep(small, BuildTopology(*small.cluster), small.cluster->accelerator, options);
  const StepTime b = ModelStep(big, BuildTopology(*big.cluster), big.cluster->accelerator, options);
  EXPECT_GT(a.memory / a.total, 2 * b.memory / b.total);
  EXPECT_GT(b.tflops_per_accelerator, a.tflops_per_accelerator);
}

}  // namespace
}  // namespace fmstack::sim
