#include "sim/step_model.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "catalog/catalog.h"
#include "spec/job_spec.h"

namespace fmstack::sim {
namespace {

const catalog::Catalog& Cat() {
  static const catalog::Catalog c = catalog::Catalog::LoadEmbedded();
  return c;
}

spec::JobSpec Job(const std::string& text) {
  return spec::ParseJobSpec(text, "j.toml", Cat());
}

TEST(StepModel, OneGpuIsComputeAtTheGivenEfficiency) {
  const spec::JobSpec job = Job(R"(
model = "gpt2-124m"
[cluster]
instance = "p5.4xlarge"
[train]
micro_batch = 8
global_batch = 64
)");
  const Topology topo = BuildTopology(*job.cluster);
  const StepTime t = ModelStep(job, topo, job.cluster->accelerator, {.compute_efficiency = 0.5});
  EXPECT_EQ(t.micro_batches, 8);
  EXPECT_GT(t.memory, 0);  // norms, GELU: memory-bound kernels
  EXPECT_DOUBLE_EQ(t.total, t.compute + t.memory);
  EXPECT_NEAR(t.mfu, 0.5 * t.compute / t.total, 1e-12);
  EXPECT_TRUE(t.fits);
}

TEST(StepModel, PipelineBubbleIsPpMinusOneOverMicroBatches) {
  const spec::JobSpec job = Job(R"(
model = "llama3-70b"
[parallel]
tp = 8
pp = 4
[cluster]
instance = "p5.48xlarge"
nodes = 16
[train]
micro_batch = 1
global_batch = 256
)");
  const StepTime t = ModelStep(job, BuildTopology(*job.cluster), job.cluster->accelerator);
  EXPECT_EQ(job.layout.dp, 4);
  EXPECT_EQ(t.micro_batches, 64);
  EXPECT_NEAR(t.bubble, (t.compute + t.memory) * 3.0 / 64.0, 1e-12 * t.compute);
  EXPECT_GT(t.tp, 0);
  EXPECT_GT(t.pp, 0);
  EXPECT_GT(t.dp, 0);
  EXPECT_LE(t.dp_exposed, t.dp);
  EXPECT_GT(t.mfu, 0.2);
  EXPECT_LT(t.mfu, 0.55);
}

TEST(StepModel, TcpInsteadOfEfaSlowsDataParallelMoreAtScale) {
  auto job_for = [](int nodes) {
    return Job(fmt::format(R"(
model = "gpt2-1.5b"
[cluster]
instance = "p4d.24xlarge"
nodes = {}
[train]
micro_batch = 4
global_batch = {}
)",
                           nodes, nodes * 8 * 4));
  };
  double prev = 0;
  for (int nodes : {16, 64}) {
    const spec::JobSpec job = job_for(nodes);
    const StepTime efa = ModelStep(job, BuildTopology(*job.cluster), job.cluster->accelerator);
    const StepTime tcp =
        ModelStep(job, BuildTopology(*job.cluster, {.tcp_only = true}), job.cluster->accelerator);
    const double speedup = tcp.total / efa.total;
    EXPECT_GT(speedup, 1.0) << nodes;
    EXPECT_GE(speedup, prev) << nodes;
    prev = speedup;
  }
}

}  // namespace
}  // namespace fmstack::sim
