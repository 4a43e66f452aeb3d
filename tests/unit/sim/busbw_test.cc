#include "sim/busbw.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "catalog/catalog.h"
#include "sim/step_model.h"
#include "spec/job_spec.h"
#include "util/error.h"

namespace fmstack::sim {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(MeasuredBusbw, ReadsNcclTestsOutputAndInterpolatesInLogSize) {
  const std::string path =
      Write("fmstack_ar.txt", R"(# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304
#       size         count      type   redop    root     time   algbw   busbw #wrong
     1048576        262144     float     sum      -1    100.0   10.49   10.00      0    99.0  10.6  10.1  0
     4194304       1048576     float     sum      -1    200.0   20.97   40.00      0   199.0  21.0  40.1  0
# Avg bus bandwidth    : 25
)");
  const MeasuredBusbw m = MeasuredBusbw::Load(path, Collective::kAllReduce);
  EXPECT_TRUE(m.Has(Collective::kAllReduce));
  EXPECT_FALSE(m.Has(Collective::kAllGather));
  EXPECT_DOUBLE_EQ(m.Busbw(Collective::kAllReduce, 1 << 20), 10e9);
  EXPECT_DOUBLE_EQ(m.Busbw(Collective::kAllReduce, 2 << 20), 25e9);  // halfway in log size
  EXPECT_DOUBLE_EQ(m.Busbw(Collective::kAllReduce, 1e12), 40e9);     // clamped
  // time = bytes x 2(n-1)/n / busbw
  EXPECT_DOUBLE_EQ(m.Time(Collective::kAllReduce, 4194304, 8), 4194304 * 1.75 / 40e9);
}

TEST(MeasuredBusbw, ReadsBenchCommMarkdownTakingTheAcrossNodesColumn) {
  const std::string path =
      Write("fmstack_bench.md", R"(allreduce — 2 ranks (GB/s; ratio = fmstack busbw / OpenMPI busbw)
| size | 1 node algbw | busbw | OpenMPI shm busbw | ratio | | n nodes algbw | busbw | OpenMPI tcp busbw | ratio |
|---|--:|--:|--:|--:|--:|--:|--:|--:|
| 1.05 MB | 3.00 | 3.00 | 2.37 | 1.26 | 0.29 | 0.50 | 1.18 | 0.25 |
| 16.8 MB | 5.15 | 5.15 | 4.73 | 1.09 | 0.55 | 1.50 | 1.80 | 0.31 |
allgather — 2 ranks (GB/s)
| size | 1 node algbw | busbw | OpenMPI shm busbw | ratio | | n nodes algbw | busbw | OpenMPI tcp busbw | ratio |
|---|--:|--:|--:|--:|--:|--:|--:|--:|
| 1.05 MB | 3.00 | 3.00 | 2.37 | 1.26 | 0.29 | 0.70 | 1.18 | 0.25 |
)");
  const MeasuredBusbw m = MeasuredBusbw::Load(path, std::nullopt);
  EXPECT_DOUBLE_EQ(m.Busbw(Collective::kAllReduce, 1.05e6), 0.5e9);
  EXPECT_DOUBLE_EQ(m.Busbw(Collective::kAllReduce, 1e9), 1.5e9);
  EXPECT_DOUBLE_EQ(m.Busbw(Collective::kAllGather, 1e6), 0.7e9);
}

TEST(MeasuredBusbw, AFileWithoutRowsIsAnErrorNamingIt) {
  const std::string path = Write("fmstack_empty.txt", "# nothing here\n");
  try {
    MeasuredBusbw::Load(path, Collective::kAllReduce);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fmstack_empty.txt"), std::string::npos);
  }
}

TEST(MeasuredBusbw, ReplacesTheModelForDataParallelTrafficAcrossNodes) {
  const std::string path = Write("fmstack_flat.txt",
                                 "1024 256 float sum -1 1 1 5.0 0\n"
                                 "1073741824 268435456 float sum -1 1 1 5.0 0\n");
  const MeasuredBusbw m = MeasuredBusbw::Load(path, Collective::kAllReduce);
  const catalog::Catalog cat = catalog::Catalog::LoadEmbedded();
  const spec::JobSpec job = spec::ParseJobSpec(R"(
model = "gpt2-1.5b"
[train]
micro_batch = 4
global_batch = 512
[cluster]
instance = "p4d.24xlarge"
nodes = 16
)",
                                               "j.toml", cat);
  StepOptions o;
  o.measured = &m;
  const StepTime t = ModelStep(job, BuildTopology(*job.cluster), job.cluster->accelerator, o);
  const double n = 128;
  const double bytes = static_cast<double>(workload::CountParams(job.model).total) * 2;
  EXPECT_NEAR(t.dp, bytes * 2 * (n - 1) / n / 5e9, 1e-9 * t.dp);
  const StepTime model = ModelStep(job, BuildTopology(*job.cluster), job.cluster->accelerator);
  EXPECT_NE(model.dp, t.dp);
}

TEST(ParseCollective, AcceptsNcclTestsAndFmstackNames) {
  EXPECT_EQ(ParseCollective("all_reduce"), Collective::kAllReduce);
  EXPECT_EQ(ParseCollective("reduce_scatter"), Collective::kReduceScatter);
  EXPECT_EQ(ParseCollective("alltoall"), Collective::kAllToAll);
  EXPECT_FALSE(ParseCollective("gather"));
}

}  // namespace
}  // namespace fmstack::sim
