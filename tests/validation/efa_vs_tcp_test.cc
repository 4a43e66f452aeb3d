// The seeds' EFA claim (PyTorch + AWS, FSDP GPT-3 175B on p4d): EFA over
// TCP gives 1.3x at 128 A100, 1.5x at 256 and 1.9x at 512 - the speed-up
// grows with the GPU count. The model reproduces the trend, for the reason
// the seed gives: at a fixed global batch each GPU computes less as GPUs are
// added while the FSDP traffic per GPU stays the same (an all-gather of all
// parameters per pass), so a slower network is hidden less and less.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "catalog/catalog.h"
#include "sim/step_model.h"
#include "spec/job_spec.h"

namespace fmstack::sim {
namespace {

spec::JobSpec Gpt175bFsdp(int gpus, const catalog::Catalog& cat) {
  // GPT-3 175B (Brown et al. 2020), global batch 1,024 x 2,048 tokens, one
  // micro-batch per GPU per step.
  return spec::ParseJobSpec(fmt::format(R"(
[model]
name = "gpt3-175b"
layers = 96
hidden = 12288
heads = 96
kv_heads = 96
ffn_hidden = 49152
vocab = 50257
seq_len = 2048
mlp = "gelu"
norm = "layernorm"
position = "learned"
tied_embeddings = true
[train]
precision = "bf16"
recompute = "full"
micro_batch = {}
global_batch = 1024
[parallel]
zero_stage = 3
[cluster]
instance = "p4d.24xlarge"
nodes = {}
)",
                                        1024 / gpus, gpus / 8),
                            "fsdp.toml", cat);
}

struct Point {
  int gpus;
  double efa_tflops, tcp_tflops;
};

std::vector<Point> Measure() {
  const catalog::Catalog cat = catalog::Catalog::LoadEmbedded();
  std::vector<Point> points;
  for (int gpus : {128, 256, 512}) {
    const spec::JobSpec job = Gpt175bFsdp(gpus, cat);
    const catalog::Accelerator& a = job.cluster->accelerator;
    const StepTime efa = ModelStep(job, BuildTopology(*job.cluster), a);
    const StepTime tcp = ModelStep(job, BuildTopology(*job.cluster, {.tcp_only = true}), a);
    points.push_back({gpus, efa.tflops_per_accelerator, tcp.tflops_per_accelerator});
  }
  return points;
}

TEST(EfaVsTcp, SpeedupGrowsWithGpuCount) {
  const std::vector<Point> points = Measure();
  double previous = 1.0;
  for (const Point& p : points) {
    const double speedup = p.efa_tflops / p.tcp_tflops;
    RecordProperty(fmt::format("speedup_{}", p.gpus), fmt::format("{:.2f}", speedup));
    std::printf("%d GPUs: EFA %.0f TFLOP/s/GPU, TCP %.0f, speed-up %.2fx\n", p.gpus, p.efa_tflops,
                p.tcp_tflops, speedup);
    EXPECT_GT(speedup, previous) << p.gpus << " GPUs";
    previous = speedup;
  }
  // The seed: 1.3x at 128 and 1.9x at 512. The model's ends stay in that band
  // widened by half: it has no TCP congestion or incast, only bandwidth.
  const double first = points.front().efa_tflops / points.front().tcp_tflops;
  const double last = points.back().efa_tflops / points.back().tcp_tflops;
  EXPECT_GT(first, 1.0);
  EXPECT_LT(first, 1.3 * 1.5);
  EXPECT_GT(last, 1.9 / 1.5);
  EXPECT_LT(last, 1.9 * 1.5);
}

TEST(EfaVsTcp, PerGpuThroughputFallsWithScaleEvenWithEfa) {
  // The seed's EFA column falls too: 159, 145, 130 TFLOP/s per GPU.
  const std::vector<Point> points = Measure();
  EXPECT_GT(points[0].efa_tflops, points[2].efa_tflops);
}

}  // namespace
}  // namespace fmstack::sim
