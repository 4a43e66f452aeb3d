#include "plan/plan.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "plan/report.h"
#include "plan/sizing.h"
#include "spec/job_spec.h"

namespace fmstack::plan {
namespace {

const catalog::Catalog& Cat() {
  static const catalog::Catalog kCatalog = catalog::Catalog::LoadEmbedded();
  return kCatalog;
}

Plan PlanExample(const char* job, const char* cluster = nullptr) {
  const std::string dir = std::string(FMSTACK_SOURCE_DIR) + "/examples/";
  spec::JobSpec spec = spec::LoadJobSpec(dir + job, Cat());
  if (cluster != nullptr) {
    spec.cluster = spec::LoadClusterSpec(dir + cluster, Cat());
    spec::ResolveLayout(spec, *spec.cluster);
  }
  return MakePlan(spec, Cat(), {});
}

TEST(Plan, Llama3_70bExampleIsComplete) {
  const Plan p = PlanExample("llama3-70b.toml");
  ASSERT_TRUE(p.cluster.has_value());
  EXPECT_EQ(p.layout.dp, 16);
  ASSERT_TRUE(p.memory.per_accelerator.has_value());
  EXPECT_LT(p.memory.per_accelerator->total(), p.memory.hbm_bytes);
  EXPECT_GT(p.compute.accelerator_hours, 0);
  EXPECT_GT(p.cost.on_demand, 0);
  EXPECT_GT(p.checkpoint.interval, 0);
  EXPECT_EQ(p.vcpus, 66 * 192);
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_EQ(p.memory.fits.size(), Cat().accelerators().size());
}

TEST(Plan, Llama405bOnP5_512) {
  const Plan p = PlanExample("llama3.1-405b.toml", "p5-512.toml");
  EXPECT_EQ(p.cluster->accelerators(), 4096);
  EXPECT_DOUBLE_EQ(p.checkpoint.mtti, 150 * 60);
  EXPECT_DOUBLE_EQ(p.checkpoint.interval_tenth_mtti, 900);
  // Young/Daly from the blocking snapshot (each of 4,096 accelerators copies
  // its share at resilience.snapshot_bandwidth); the interval cannot be
  // shorter than the slowest tier's drain (the shared file system here).
  EXPECT_DOUBLE_EQ(p.checkpoint.save_seconds, p.checkpoint.bytes / 4096 / 25e9);
  EXPECT_DOUBLE_EQ(p.checkpoint.interval_young_daly,
                   IntervalYoungDaly(p.checkpoint.save_seconds, 9000));
  ASSERT_EQ(p.checkpoint.tiers.size(), 3u);
  EXPECT_DOUBLE_EQ(p.checkpoint.tiers[0].write_seconds, 2 * p.checkpoint.bytes / 512 / 8e9);
  EXPECT_GT(p.checkpoint.drain_seconds, p.checkpoint.interval_young_daly);
  EXPECT_DOUBLE_EQ(p.checkpoint.interval, p.checkpoint.drain_seconds);
  EXPECT_TRUE(p.warnings.empty()) << p.warnings.front();
}

TEST(Plan, RendersAllFormats) {
  const Plan p = PlanExample("llama3-70b.toml");
  const std::string text = RenderText(p);
  EXPECT_NE(text.find("Checkpoints"), std::string::npos);
  EXPECT_NE(RenderMarkdown(p).find("| item | value | detail |"), std::string::npos);
  const nlohmann::json j = ToJson(p);
  EXPECT_EQ(j["schema_version"], kPlanSchemaVersion);
  EXPECT_EQ(j["model"]["params_total"], 70'553'706'496);
  EXPECT_EQ(j["vcpus"], 12'672);
}

TEST(Plan, WithoutClusterStillSizesMemoryAndCheckpoint) {
  const spec::JobSpec job =
      spec::ParseJobSpec("model = \"llama2-7b\"\n[train]\nstate = \"bf16\"\n", "j.toml", Cat());
  const Plan p = MakePlan(job, Cat(), {});
  EXPECT_FALSE(p.memory.per_accelerator.has_value());
  EXPECT_DOUBLE_EQ(p.checkpoint.bytes, 6.0 * 6'738'415'616);
  EXPECT_NO_THROW(RenderText(p));
  EXPECT_NO_THROW(ToJson(p).dump());
}

TEST(Plan, TokensComeFromStepsWhenTrainTokensIsUnset) {
  const spec::JobSpec job = spec::ParseJobSpec(
      "model = \"gpt-mini\"\n[train]\nglobal_batch = 8\nsteps = 120\n", "j.toml", Cat());
  const Plan p = MakePlan(job, Cat(), {});
  EXPECT_DOUBLE_EQ(p.compute.tokens, 120.0 * 8 * 256);
  EXPECT_TRUE(p.compute.tokens_from_steps);
  EXPECT_NE(RenderText(p).find("train.steps x global_batch x seq_len"), std::string::npos);
}

TEST(Plan, MasterWeightsAreNamedOnlyWhenTheConventionHasThem) {
  const spec::JobSpec fp32 =
      spec::ParseJobSpec("model = \"gpt-mini\"\n[train]\nprecision = \"fp32\"\n", "j.toml", Cat());
  const spec::JobSpec mixed =
      spec::ParseJobSpec("model = \"gpt-mini\"\n[train]\nstate = \"mixed\"\n", "j.toml", Cat());
  EXPECT_EQ(RenderText(MakePlan(fp32, Cat(), {})).find("master"), std::string::npos);
  EXPECT_NE(RenderText(MakePlan(mixed, Cat(), {})).find("fp32 master"), std::string::npos);
}

TEST(Plan, WarnsWhenTheLayoutDoesNotFit) {
  const spec::JobSpec job = spec::ParseJobSpec(R"(
model = "llama3-70b"
[train]
recompute = "none"
[parallel]
zero_stage = 0
[cluster]
instance = "p5.48xlarge"
nodes = 1
)",
                                               "j.toml", Cat());
  const Plan p = MakePlan(job, Cat(), {});
  const bool found = std::any_of(p.warnings.begin(), p.warnings.end(), [](const std::string& w) {
    return w.find("does not fit") != std::string::npos;
  });
  EXPECT_TRUE(found);
  ASSERT_TRUE(p.fits.has_value());
  EXPECT_FALSE(*p.fits);
  const nlohmann::json j = ToJson(p);
  EXPECT_EQ(j["fits"]["ok"], false);
  EXPECT_NE(j["fits"]["reason"].get<std::string>().find("HBM of h100-80gb"), std::string::npos);
  // Only local disks: the plan says that no tier is durable.
  const bool durable = std::any_of(p.warnings.begin(), p.warnings.end(), [](const std::string& w) {
    return w.find("no durable tier") != std::string::npos;
  });
  EXPECT_TRUE(durable);
}

TEST(Plan, FitsIsUnknownWithoutACluster) {
  const Plan p =
      MakePlan(spec::ParseJobSpec("model = \"llama2-7b\"\n", "j.toml", Cat()), Cat(), {});
  EXPECT_FALSE(p.fits.has_value());
  EXPECT_TRUE(ToJson(p)["fits"].is_null());
}

TEST(Sizing, YoungDalyBeatsTenthOfMttiWhenSavesAreCheap) {
  const double mtti = 9000, save = 5;
  const double yd = IntervalYoungDaly(save, mtti);
  EXPECT_LT(CheckpointOverhead(yd, save, mtti),
            CheckpointOverhead(IntervalTenthOfMtti(mtti), save, mtti));
}

}  // namespace
}  // namespace fmstack::plan
