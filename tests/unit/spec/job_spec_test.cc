#include "spec/job_spec.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "util/units.h"
#include "workload/presets.h"

namespace fmstack::spec {
namespace {

const catalog::Catalog& Cat() {
  static const catalog::Catalog kCatalog = catalog::Catalog::LoadEmbedded();
  return kCatalog;
}

TEST(JobSpec, PresetByName) {
  const JobSpec job = ParseJobSpec("model = \"llama3-70b\"\n", "j.toml", Cat());
  EXPECT_EQ(job.model.hidden, 8192);
  EXPECT_EQ(job.model.kv_heads, 8);
  EXPECT_EQ(job.name, "llama3-70b");
  EXPECT_FALSE(job.cluster.has_value());
}

TEST(JobSpec, PresetWithOverrides) {
  const JobSpec job = ParseJobSpec(R"(
[model]
preset = "llama3.1-405b"
seq_len = 8192
layers = 64
)",
                                   "j.toml", Cat());
  EXPECT_EQ(job.model.seq_len, 8192);
  EXPECT_EQ(job.model.layers, 64);
  EXPECT_EQ(job.model.hidden, 16384);
}

TEST(JobSpec, CustomShapeFromScratch) {
  const JobSpec job = ParseJobSpec(R"(
[model]
layers = 2
hidden = 64
heads = 4
ffn_hidden = 256
vocab = 100
seq_len = 32
mlp = "swiglu"
norm = "rmsnorm"
position = "rope"
tied_embeddings = false
bias = false
experts = 4
active_experts = 2
)",
                                   "j.toml", Cat());
  EXPECT_EQ(job.model.kv_heads, 4);  // defaults to heads
  EXPECT_TRUE(job.model.is_moe());
  EXPECT_EQ(job.model.mlp, workload::MlpKind::kSwiGlu);
  EXPECT_EQ(job.model.head_dim(), 16);  // hidden / heads
}

TEST(JobSpec, HeadDimSetsTheHeadsWidth) {
  const JobSpec job = ParseJobSpec(R"(
[model]
layers = 2
hidden = 64
heads = 4
kv_heads = 1
head_dim = 8
ffn_hidden = 256
vocab = 100
seq_len = 32
)",
                                   "j.toml", Cat());
  EXPECT_EQ(job.model.head_dim(), 8);
  EXPECT_EQ(job.model.q_dim(), 32);
}

TEST(JobSpec, EverySectionParses) {
  const JobSpec job = ParseJobSpec(R"(
name = "full"
model = "llama3-8b"
[train]
precision = "fp8"
state = "bf16"
optimizer = "adamw"
recompute = "full"
flash_attention = false
micro_batch = 2
global_batch = 64
tokens = "15T"
target_mfu = 0.35
[parallel]
dp = 4
tp = 4
pp = 1
zero_stage = 2
[checkpoint]
interval = "30m"
keep = 5
overhead_budget = 0.05
[data]
size = "3.4TB"
[cluster]
instance = "p5"
nodes = 2
spares = 1
nodes_per_rack = 2
node_mtbf = "1000h"
spot_fraction = 0.5
spot_discount = 0.6
[cluster.shared]
tier = "fsx-lustre-persistent2-500"
capacity = "10TiB"
)",
                                   "j.toml", Cat());
  EXPECT_EQ(job.train.precision, catalog::Precision::kFp8);
  EXPECT_EQ(job.train.state.per_param(), 8);
  EXPECT_EQ(job.train.recompute, workload::Recompute::kFull);
  EXPECT_DOUBLE_EQ(job.train.tokens, 15e12);  // "15T": a count with a decimal suffix
  EXPECT_EQ(job.layout.dp, 4);
  EXPECT_EQ(job.layout.zero_stage, 2);
  EXPECT_FALSE(job.checkpoint.interval_auto);
  EXPECT_DOUBLE_EQ(job.checkpoint.interval_seconds, 1800);
  EXPECT_DOUBLE_EQ(job.data.size_bytes, 3.4e12);
  ASSERT_TRUE(job.cluster.has_value());
  EXPECT_EQ(job.cluster->instance.name, "p5.48xlarge");
  EXPECT_EQ(job.cluster->accelerators(), 16);
  EXPECT_DOUBLE_EQ(job.cluster->JobMtti(), 500 * units::kHour);
  // Lustre throughput scales with capacity: 500 MB/s per TiB x 10 TiB.
  EXPECT_DOUBLE_EQ(job.cluster->shared.write_bandwidth, 5e9);
}

TEST(JobSpec, DpAutoFillsTheCluster) {
  const JobSpec job = ParseJobSpec(R"(
model = "llama3-70b"
[parallel]
tp = 8
pp = 4
[cluster]
instance = "p5.48xlarge"
nodes = 64
)",
                                   "j.toml", Cat());
  EXPECT_EQ(job.layout.dp, 16);
}

TEST(JobSpec, LocalBackendNeedsNoInstanceAndFillsDpWithWorkers) {
  const JobSpec job = ParseJobSpec(R"(
model = "gpt-mini"
[cluster]
backend = "local"
nodes = 2
procs_per_node = 3
[train]
micro_batch = 2
global_batch = 12
)",
                                   "j.toml", Cat());
  ASSERT_TRUE(job.cluster.has_value());
  EXPECT_EQ(job.cluster->backend, "local");
  EXPECT_EQ(job.cluster->instance.name, kLocalInstance);
  EXPECT_EQ(job.cluster->procs_per_node, 3);
  EXPECT_EQ(job.layout.dp, 6);
}

TEST(JobSpec, UnknownBackendAndMissingInstanceAreNamed) {
  try {
    ParseJobSpec("model = \"gpt-mini\"\n[cluster]\nbackend = \"locl\"\n", "j.toml", Cat());
    FAIL() << "accepted an unknown backend";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.key(), "cluster.backend") << e.what();
    EXPECT_NE(std::string(e.what()).find("local"), std::string::npos) << e.what();
  }
  try {
    ParseJobSpec("model = \"gpt-mini\"\n[cluster]\nnodes = 2\n", "j.toml", Cat());
    FAIL() << "accepted a cluster without an instance";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.key(), "cluster.instance") << e.what();
  }
}

// train.matmul picks how the trainer's matmuls round their operands; the
// older train.tf32 is refused with its new spelling, and tf32 on the CPU is
// refused rather than silently ignored (bf16 is the CPU's too: whether this
// CPU can run it is the model's to say, gpt/cpu_model.cc).
TEST(JobSpec, MatmulPrecisionIsNamedAndTf32OnlyForCuda) {
  const auto parse = [](const std::string& train) {
    return ParseJobSpec("model = \"gpt-mini\"\n[train]\n" + train, "j.toml", Cat());
  };
  EXPECT_EQ(parse("device = \"cuda\"\n").train.matmul, "fp32");
  EXPECT_EQ(parse("device = \"cuda\"\nmatmul = \"bf16\"\n").train.matmul, "bf16");
  EXPECT_EQ(parse("device = \"cuda\"\nmatmul = \"tf32\"\n").train.matmul, "tf32");
  EXPECT_EQ(parse("matmul = \"bf16\"\n").train.matmul, "bf16");
  const std::pair<const char*, const char*> bad[] = {
      {"device = \"cuda\"\ntf32 = true\n", "matmul = \"tf32\""},
      {"device = \"cuda\"\nmatmul = \"fp16\"\n", "bf16"},
      {"matmul = \"tf32\"\n", "device = \"cuda\""},
  };
  for (const auto& [train, says] : bad) {
    try {
      parse(train);
      ADD_FAILURE() << "accepted " << train;
    } catch (const SpecError& e) {
      EXPECT_TRUE(e.key() == "train.matmul" || e.key() == "train.tf32") << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

TEST(JobSpec, ExamplesLoad) {
  for (const char* name :
       {"llama3-70b.toml", "llama3.1-405b.toml", "gpt-mini-local.toml", "gpt-mini-cuda.toml"}) {
    const std::string path = std::string(FMSTACK_SOURCE_DIR) + "/examples/" + name;
    EXPECT_NO_THROW(LoadJobSpec(path, Cat())) << path;
  }
  EXPECT_NO_THROW(
      LoadClusterSpec(std::string(FMSTACK_SOURCE_DIR) + "/examples/p5-512.toml", Cat()));
}

}  // namespace
}  // namespace fmstack::spec
