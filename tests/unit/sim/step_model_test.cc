#include "sim/step_model.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "catalog/catalog.h"
#include "spec/job_spec.h"
#include "util/error.h"
#include "workload/memory.h"
#include "workload/shape.h"

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
flash_attention = false
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

// parallel.sequence_parallel = false keeps the activations outside the TP
// regions whole on every TP rank: more memory and more memory-bound time,
// the same TP traffic (an all-reduce is a reduce-scatter + all-gather).
TEST(StepModel, SequenceParallelOffCostsMemoryAndMemoryBoundTime) {
  const std::string base = R"(
model = "llama3-70b"
[cluster]
instance = "p5.48xlarge"
nodes = 8
[train]
micro_batch = 1
global_batch = 64
[parallel]
tp = 8
pp = 2
)";
  const spec::JobSpec on = Job(base), off = Job(base + "sequence_parallel = false\n");
  EXPECT_TRUE(on.layout.sequence_parallel);
  EXPECT_FALSE(off.layout.sequence_parallel);
  const StepTime a = ModelStep(on, BuildTopology(*on.cluster), on.cluster->accelerator);
  const StepTime b = ModelStep(off, BuildTopology(*off.cluster), off.cluster->accelerator);
  EXPECT_GT(b.memory, a.memory);
  EXPECT_GT(b.memory_per_accelerator, a.memory_per_accelerator);
  EXPECT_DOUBLE_EQ(b.tp, a.tp);
  EXPECT_DOUBLE_EQ(b.compute, a.compute);
  EXPECT_GT(b.total, a.total);
}

// parallel.ep_overlap hides that fraction of the MoE all-to-alls, never more
// than the step's compute, and leaves the whole traffic reported.
TEST(StepModel, ExpertOverlapHidesItsShareOfTheAllToAlls) {
  const std::string base = R"(
model = "mixtral-8x7b"
[cluster]
instance = "p5.48xlarge"
nodes = 4
[train]
micro_batch = 1
global_batch = 64
[parallel]
tp = 2
ep = 8
)";
  const spec::JobSpec plain = Job(base), half = Job(base + "ep_overlap = 0.5\n");
  const spec::JobSpec all = Job(base + "ep_overlap = 1\n");
  const auto step = [](const spec::JobSpec& j) {
    return ModelStep(j, BuildTopology(*j.cluster), j.cluster->accelerator);
  };
  const StepTime a = step(plain), b = step(half), c = step(all);
  ASSERT_GT(a.ep, 0);
  EXPECT_DOUBLE_EQ(a.ep_exposed, a.ep);
  EXPECT_DOUBLE_EQ(b.ep, a.ep);
  EXPECT_NEAR(b.ep_exposed, std::max(0.5 * a.ep, a.ep - a.compute), 1e-12 * a.ep);
  EXPECT_NEAR(a.total - b.total, a.ep - b.ep_exposed, 1e-9 * a.total);
  EXPECT_NEAR(c.ep_exposed, std::max(0.0, a.ep - a.compute), 1e-12 * a.ep);
  EXPECT_THROW(Job(base + "ep_overlap = 1.5\n"), SpecError);
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

// Flash attention skips the causal mask's upper half, and runs at the
// kernel's published rate where that is below the GEMMs' (H100: 335 of
// 989 TFLOP/s for FlashAttention-2): everything else is unchanged.
// ZeRO-3 layer by layer: without prefetch every gather and reduce-scatter
// waits for the compute (the whole of the communication shows); with it,
// uniform layers expose the first gather, the last reduce-scatter and the
// unhidden share of the rest, and splitting the same parameters into more
// layers costs more, one latency per collective per layer.
TEST(StepModel, FsdpIsTimedLayerByLayer) {
  const auto step = [](int layers, bool prefetch) {
    const spec::JobSpec job = Job(fmt::format(R"(
[model]
name = "m"
layers = {}
hidden = 4096
heads = 32
ffn_hidden = 16384
vocab = 32000
seq_len = 2048
[train]
micro_batch = 16
global_batch = 1024
[parallel]
zero_stage = 3
fsdp_prefetch = {}
[cluster]
instance = "p4d.24xlarge"
nodes = 8
)",
                                              layers, prefetch));
    return ModelStep(job, BuildTopology(*job.cluster), job.cluster->accelerator);
  };
  const StepTime serial = step(32, false), overlapped = step(32, true);
  EXPECT_GT(serial.dp, 0);
  EXPECT_NEAR(serial.dp_exposed, serial.dp, 1e-9 * serial.dp);
  EXPECT_LT(overlapped.dp_exposed, 0.5 * overlapped.dp);
  EXPECT_NEAR(overlapped.dp, serial.dp, 1e-12 * serial.dp);  // the same traffic
  // Compute dominates here: what shows is the first gather and last
  // reduce-scatter per micro-batch plus 30% of the rest.
  EXPECT_GT(overlapped.dp_exposed, 0.3 * overlapped.dp);
  // Twice the layers at half the width would change the compute; the same
  // layers' collectives cut in two pay their latency twice instead.
  const StepTime finer = step(64, true);
  EXPECT_GT(finer.dp / static_cast<double>(finer.micro_batches),
            overlapped.dp / static_cast<double>(overlapped.micro_batches));
}

// Half the scores under the causal mask, with the backward's recomputation
// (3.5 passes' worth for the 3 counted): the forward pass at the kernel's
// measured forward rate, the backward (2.5 of them) at its backward rate.
TEST(StepModel, FlashAttentionDoesHalfTheScoresAtItsOwnRate) {
  const std::string text = R"(
model = "llama3-8b"
[cluster]
instance = "p5.48xlarge"
[parallel]
tp = 8
[train]
micro_batch = 1
global_batch = 8
flash_attention = {}
)";
  const spec::JobSpec flash = Job(fmt::format(fmt::runtime(text), "true"));
  const spec::JobSpec plain = Job(fmt::format(fmt::runtime(text), "false"));
  const catalog::Accelerator& h100 = flash.cluster->accelerator;
  ASSERT_DOUBLE_EQ(h100.flash_attention_flops, 335e12);
  ASSERT_DOUBLE_EQ(h100.flash_attention_backward_flops, 322e12);
  const StepOptions o{.compute_efficiency = 0.5};
  const Topology topo = BuildTopology(*flash.cluster);
  const StepTime f = ModelStep(flash, topo, h100, o);
  const StepTime p = ModelStep(plain, topo, h100, o);
  const double tokens = 8.0 * static_cast<double>(flash.model.seq_len);
  const double attention = workload::TrainingFlopsPerToken(flash.model).attention * tokens / 8;
  const double achieved = 0.5 * h100.PeakFlops(catalog::Precision::kBf16);
  const double flash_seconds = attention / 2 / 3 * (1 / 335e12 + 2.5 / 322e12);
  EXPECT_NEAR(f.compute - p.compute, flash_seconds - attention / achieved, 1e-9);
  EXPECT_DOUBLE_EQ(f.tflops_per_accelerator * f.total, p.tflops_per_accelerator * p.total);
}

// Context parallelism: weights are replicated over dp x cp ranks, so ZeRO
// shards over all of them; the K/V ring hides behind attention where the
// all-gather does not; without load balancing the last rank's causal work
// sets the pace.
TEST(StepModel, ContextParallelExchangeShardingAndBalance) {
  const std::string text = R"(
[model]
preset = "llama3-70b"
seq_len = 65536
[cluster]
instance = "p5.48xlarge"
nodes = 8
[parallel]
tp = 8
cp = 8
zero_stage = 1
{}
[train]
micro_batch = 1
global_batch = 8
recompute = "full"
)";
  const auto step = [&](const std::string& extra) {
    const spec::JobSpec job = Job(fmt::format(fmt::runtime(text), extra));
    return ModelStep(job, BuildTopology(*job.cluster), job.cluster->accelerator);
  };
  const StepTime ring = step("");
  const StepTime gathered = step("cp_comm = \"allgather\"");
  const StepTime contiguous = step("cp_load_balance = false");
  EXPECT_GT(gathered.cp, ring.cp);
  EXPECT_EQ(gathered.compute, ring.compute);
  EXPECT_GT(contiguous.compute, ring.compute);
  // dp = 1: only the cp ranks shard the optimizer; one rank would hold it whole.
  const spec::JobSpec job = Job(fmt::format(fmt::runtime(text), ""));
  workload::ActivationOptions a;
  a.recompute = workload::Recompute::kFull;
  workload::Layout alone = job.layout;
  alone.cp = 1;
  const double sharded =
      workload::PerAccelerator(job.model, job.train.state, job.layout, a).optimizer;
  const double whole = workload::PerAccelerator(job.model, job.train.state, alone, a).optimizer;
  EXPECT_NEAR(sharded * 8, whole, whole * 1e-12);
}

}  // namespace
}  // namespace fmstack::sim
