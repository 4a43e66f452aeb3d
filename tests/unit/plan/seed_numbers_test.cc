// Every arithmetically consistent worked example in the seed articles, with
// the seed's number. Inconsistent ones test the correct arithmetic; each is
// explained in docs/seed-arithmetic.md.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "catalog/catalog.h"
#include "plan/plan.h"
#include "plan/sizing.h"
#include "spec/job_spec.h"
#include "util/units.h"
#include "workload/memory.h"
#include "workload/presets.h"

namespace fmstack::plan {
namespace {

using units::kGB;
using units::kTB;

const catalog::Catalog& Cat() {
  static const catalog::Catalog kCatalog = catalog::Catalog::LoadEmbedded();
  return kCatalog;
}

double H100Hbm() {
  return Cat().FindAccelerator("h100-80gb")->hbm_bytes;
}

// Seed 003: Llama 3 70B in BF16 needs 560 GB (140 + 140 + 280) -> 7 H100-80GB.
TEST(SeedNumbers, Llama3_70bTrainingStateAndSevenH100) {
  const workload::MemoryBreakdown m = workload::TrainingState(70e9, workload::Bf16Everything());
  EXPECT_DOUBLE_EQ(m.params, 140 * kGB);
  EXPECT_DOUBLE_EQ(m.grads, 140 * kGB);
  EXPECT_DOUBLE_EQ(m.optimizer, 280 * kGB);
  EXPECT_DOUBLE_EQ(m.state(), 560 * kGB);
  EXPECT_EQ(workload::MinDevices(m.state(), H100Hbm()), 7);
  // With the exact parameter count (70.55B) the state is 564 GB: 8 H100.
  const double exact =
      static_cast<double>(workload::CountParams(*workload::FindPreset("llama3-70b")).total);
  EXPECT_EQ(workload::MinDevices(workload::TrainingState(exact, workload::Bf16Everything()).state(),
                                 H100Hbm()),
            8);
}

// Seed 003: 6 x 70e9 x 1.4e12 = 5.88e23 FLOPs; ~19 years on one 1 PFLOP/s
// accelerator, ~7 days on 1,000.
TEST(SeedNumbers, ComputeForSeventyBillionOnOnePointFourTrillionTokens) {
  const double flops = 6 * 70e9 * 1.4e12;
  EXPECT_DOUBLE_EQ(flops, 5.88e23);
  const double hours = workload::AcceleratorHours(flops, 1e15, 1.0);
  EXPECT_EQ(std::lround(WallSeconds(hours, 1) / units::kYear), 19);   // 18.6 years
  EXPECT_EQ(std::lround(WallSeconds(hours, 1000) / units::kDay), 7);  // 6.8 days
}

// Seed 003: checkpoint = params + optimizer, BF16: 42 GB, 78 GB, 420 GB, 2.43 TB.
TEST(SeedNumbers, CheckpointSizes) {
  const workload::StateBytes bf16 = workload::Bf16Everything();
  EXPECT_DOUBLE_EQ(workload::CheckpointBytes(7e9, bf16), 42 * kGB);
  EXPECT_DOUBLE_EQ(workload::CheckpointBytes(13e9, bf16), 78 * kGB);
  EXPECT_DOUBLE_EQ(workload::CheckpointBytes(70e9, bf16), 420 * kGB);
  EXPECT_DOUBLE_EQ(workload::CheckpointBytes(405e9, bf16), 2.43 * kTB);
}

// Seed 003: MTTI 150 min -> checkpoint every 15 min.
TEST(SeedNumbers, IntervalIsATenthOfMtti) {
  EXPECT_DOUBLE_EQ(IntervalTenthOfMtti(150 * units::kMinute), 15 * units::kMinute);
}

// Seed 003: 2.43 TB / (15 min x 60 x 0.9) = 2.43 TB / 810 s ~ 3 GB/s.
TEST(SeedNumbers, AsyncSaveBandwidthFor405b) {
  const double bw = AsyncSaveBandwidth(2.43 * kTB, 15 * units::kMinute, 0.1);
  EXPECT_DOUBLE_EQ(bw, 2.43 * kTB / 810);
  EXPECT_NEAR(bw / kGB, 3.0, 0.01);
  // A blocking save within a 10% budget needs 10x the interval's worth: 27 GB/s.
  EXPECT_NEAR(BlockingSaveBandwidth(2.43 * kTB, 900, 0.1) / kGB, 27.0, 1e-9);
}

// Seed 003: 15 TB + 3 x 420 GB ~ 16.3 TB; 170 TB + 3 x 2.43 TB ~ 177 TB.
TEST(SeedNumbers, StorageCapacity) {
  EXPECT_NEAR(StorageCapacity(15 * kTB, 420 * kGB, 3) / kTB, 16.3, 0.05);
  EXPECT_NEAR(StorageCapacity(170 * kTB, 2.43 * kTB, 3) / kTB, 177, 0.5);
}

// Seed 003: DeepSeek V3 inference, 1,343 GB weights + 200 GB activations =
// 1,543 GB -> 20 H100-80GB.
TEST(SeedNumbers, DeepSeekV3InferenceNeedsTwentyH100) {
  EXPECT_EQ(workload::MinDevices(1543 * kGB, H100Hbm()), 20);
  // From the parameter count: 671e9 x 2 bytes = 1,342 GB (+200 GB) -> still 20.
  const double bytes = InferenceBytes(671e9, 2, 200 * kGB);
  EXPECT_DOUBLE_EQ(bytes, 1542 * kGB);
  EXPECT_EQ(workload::MinDevices(bytes, H100Hbm()), 20);
}

// Seed 000: vCPU quota 8 x 192 = 1,536; 64 x 192 = 12,288; 512 x 192 = 98,304.
TEST(SeedNumbers, VcpuQuotaForP5) {
  const int64_t vcpus = Cat().FindInstance("p5.48xlarge")->vcpus;
  EXPECT_EQ(VcpuQuota(8, vcpus), 1'536);
  EXPECT_EQ(VcpuQuota(64, vcpus), 12'288);
  EXPECT_EQ(VcpuQuota(512, vcpus), 98'304);
}

// Seed 000: 10 x p4d.24xlarge for 24 h x 30 days on-demand = $236,000/month
// (at the pre-June-2025 rate the seed used).
TEST(SeedNumbers, P4dMonthlyOnDemand) {
  const double rate = Cat().FindInstance("p4d.24xlarge")->previous_price_per_hour;
  EXPECT_NEAR(Cost(10 * 24 * 30, rate, 0, 0), 236'000, 236'000 * 0.001);
  // 80% Spot at the discount the seed's $73,400 implies (86.1%).
  EXPECT_NEAR(Cost(10 * 24 * 30, rate, 0.8, 0.861), 73'400, 73'400 * 0.005);
}

// Seed 003 says 1,250 H100 finish Llama 3 70B's GPU-hours in a month; the
// model card's 6.4M H100-hours (the seed's table: ~6.7M) need ~9,300.
TEST(SeedNumbers, AcceleratorsForAMonthCorrected) {
  EXPECT_EQ(AcceleratorsToFinish(6.7e6, 30 * units::kDay), 9'306);
  EXPECT_EQ(AcceleratorsToFinish(6.4e6, 30 * units::kDay), 8'889);
}

// Llama 2 paper: 184,320 / 368,640 / 1,720,320 A100-80GB hours for 2T tokens.
// At 312 TFLOP/s and 6N FLOPs per token, that is 39.06% / 37.72% / 42.84% MFU,
// and those MFUs give the hours back.
struct Llama2Run {
  const char* preset;
  double hours;
  double mfu;
};

class Llama2Mfu : public ::testing::TestWithParam<Llama2Run> {};

spec::JobSpec Llama2Job(const char* preset) {
  const std::string text = fmt::format(R"(
model = "{}"
[train]
tokens = 2e12
target_mfu = 0.4
[cluster]
instance = "p4de.24xlarge"
nodes = 1
)",
                                       preset);
  return spec::ParseJobSpec(text, "llama2.toml", Cat());
}

TEST_P(Llama2Mfu, ImpliedMfuAndBack) {
  const Llama2Run run = GetParam();
  PlanOptions options;
  options.observed_hours = run.hours;
  const Plan plan = MakePlan(Llama2Job(run.preset), Cat(), options);
  EXPECT_DOUBLE_EQ(plan.compute.peak_flops, 312e12);
  EXPECT_NEAR(100 * plan.compute.implied_mfu_6n, run.mfu, 0.05) << run.preset;
  EXPECT_GT(plan.compute.implied_mfu_detailed, plan.compute.implied_mfu_6n);

  spec::JobSpec job = Llama2Job(run.preset);
  job.train.target_mfu = run.mfu / 100;
  const Plan back = MakePlan(job, Cat(), {});
  EXPECT_NEAR(back.compute.accelerator_hours / run.hours, 1.0, 0.001) << run.preset;
}

INSTANTIATE_TEST_SUITE_P(PublishedRuns, Llama2Mfu,
                         ::testing::Values(Llama2Run{"llama2-7b", 184'320, 39.06},
                                           Llama2Run{"llama2-13b", 368'640, 37.72},
                                           Llama2Run{"llama2-70b", 1'720'320, 42.84}));

}  // namespace
}  // namespace fmstack::plan
