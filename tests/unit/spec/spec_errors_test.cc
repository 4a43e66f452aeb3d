// Malformed specs: each error names the file, the line and the key, and says
// what was expected.
#include <gtest/gtest.h>

#include "catalog/catalog.h"
#include "spec/job_spec.h"

namespace fmstack::spec {
namespace {

const catalog::Catalog& Cat() {
  static const catalog::Catalog kCatalog = catalog::Catalog::LoadEmbedded();
  return kCatalog;
}

struct BadSpec {
  const char* what;
  const char* text;
  int line;
  const char* key;
  const char* message_part;
};

class SpecErrors : public ::testing::TestWithParam<BadSpec> {};

TEST_P(SpecErrors, NameFileLineAndKey) {
  const BadSpec bad = GetParam();
  try {
    ParseJobSpec(bad.text, "bad.toml", Cat());
    FAIL() << bad.what << ": no error";
  } catch (const SpecError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.pos().file, "bad.toml") << msg;
    EXPECT_EQ(e.pos().line, bad.line) << msg;
    EXPECT_EQ(e.key(), bad.key) << msg;
    EXPECT_NE(msg.find("bad.toml:" + std::to_string(bad.line)), std::string::npos) << msg;
    EXPECT_NE(msg.find(bad.message_part), std::string::npos) << bad.what << ": " << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, SpecErrors,
    ::testing::Values(
        BadSpec{"wrong type", "model = \"gpt2-124m\"\n[train]\nmicro_batch = \"four\"\n", 3,
                "train.micro_batch", "expected a positive integer, got string \"four\""},
        BadSpec{"unknown key with suggestion",
                "model = \"gpt2-124m\"\n[parallel]\ntp = 2\nzero_stgae = 1\n", 4,
                "parallel.zero_stgae", "did you mean 'zero_stage'?"},
        BadSpec{"unknown section", "model = \"gpt2-124m\"\n\n[trian]\ntokens = 1e9\n", 3, "trian",
                "did you mean 'train'?"},
        BadSpec{"negative count", "model = \"gpt2-124m\"\n[parallel]\npp = -2\n", 3, "parallel.pp",
                "expected a positive integer (>= 1), got -2"},
        BadSpec{"tp does not divide heads", "model = \"llama3-8b\"\n[parallel]\ntp = 3\n", 3,
                "parallel.tp", "tp (3) must divide model.heads (32)"},
        BadSpec{"unknown instance type",
                "model = \"gpt2-124m\"\n[cluster]\ninstance = \"p5.48xlarg\"\n", 3,
                "cluster.instance", "did you mean 'p5.48xlarge'?"},
        BadSpec{"unknown preset", "model = \"llama3-7b\"\n", 1, "model", "unknown model preset"},
        BadSpec{"heads do not divide hidden", "[model]\npreset = \"gpt2-124m\"\nheads = 7\n", 3,
                "model.heads", "heads (7) must divide hidden (768)"},
        BadSpec{"bad unit", "model = \"gpt2-124m\"\n[data]\nsize = \"15 TQ\"\n", 3, "data.size",
                "unknown unit 'tq'"},
        BadSpec{"out of range", "model = \"gpt2-124m\"\n[parallel]\nzero_stage = 4\n", 3,
                "parallel.zero_stage", "expected an integer in [0, 3], got 4"},
        BadSpec{"bad enum", "model = \"gpt2-124m\"\n[train]\nprecision = \"bf61\"\n", 3,
                "train.precision", "did you mean 'bf16'?"},
        BadSpec{"mfu above one", "model = \"gpt2-124m\"\n[train]\ntarget_mfu = 40\n", 3,
                "train.target_mfu", "expected a number in [0.001, 1], got 40"},
        BadSpec{"layout does not tile cluster",
                "model = \"llama3-8b\"\n[parallel]\ndp = 3\ntp = 8\n[cluster]\ninstance = "
                "\"p5.48xlarge\"\nnodes = 2\n",
                3, "parallel.dp", "dp x tp x pp x cp = 24 but the cluster has 16 accelerators"},
        BadSpec{"global batch not a multiple",
                "model = \"gpt2-124m\"\n[train]\nglobal_batch = 100\n[cluster]\ninstance = "
                "\"p5.48xlarge\"\nnodes = 2\n",
                3, "train.global_batch", "must be a multiple of micro_batch x dp = 1 x 16 = 16"},
        BadSpec{"syntax error", "model = \"gpt2-124m\"\n[train\n", 2, "", "TOML syntax error"},
        BadSpec{"missing model", "[train]\ntokens = 1e9\n", 1, "model", "is required"},
        BadSpec{"spot without discount",
                "model = \"gpt2-124m\"\n[cluster]\ninstance = \"p5\"\nspot_fraction = 0.5\n", 4,
                "cluster.spot_fraction", "needs spot_discount"},
        BadSpec{"checkpoint write deadline of zero",
                "model = \"gpt2-124m\"\n[checkpoint]\nwrite_timeout = \"0s\"\n", 3,
                "checkpoint.write_timeout", "expected at least 1 s"},
        BadSpec{"unknown storage tier",
                "model = \"gpt2-124m\"\n[cluster]\ninstance = \"p5\"\n[cluster.shared]\ntier = "
                "\"fsx-lustre-scratch3\"\n",
                5, "cluster.shared.tier", "did you mean 'fsx-lustre-scratch2'?"}));

TEST(SpecErrors, MissingClusterFileNamesThePath) {
  try {
    ParseJobSpec("model = \"gpt2-124m\"\ncluster = \"nowhere.toml\"\n", "dir/job.toml", Cat());
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_EQ(e.pos().line, 2);
    EXPECT_NE(std::string(e.what()).find("dir/nowhere.toml"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fmstack::spec
