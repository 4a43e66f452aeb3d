// plan and sim read a job's MTTI, blocking save and interval from one place
// (resilience/job_model.h), and sim plays out the cluster's stated MTTI.
#include <gtest/gtest.h>

#include <string>

#include "plan/plan.h"
#include "resilience/job_model.h"
#include "sim/monte_carlo.h"
#include "sim/scenario.h"
#include "spec/job_spec.h"

namespace fmstack::resilience {
namespace {

const catalog::Catalog& Cat() {
  static const catalog::Catalog c = catalog::Catalog::LoadEmbedded();
  return c;
}

spec::JobSpec Example(const std::string& job, const std::string& cluster = "") {
  const std::string dir = std::string(FMSTACK_SOURCE_DIR) + "/examples/";
  spec::JobSpec spec = spec::LoadJobSpec(dir + job, Cat());
  if (!cluster.empty()) {
    spec.cluster = spec::LoadClusterSpec(dir + cluster, Cat());
    spec::ResolveLayout(spec, *spec.cluster);
  }
  return spec;
}

class PlanAndSimAgree : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(PlanAndSimAgree, OnMttiBlockingSaveAndInterval) {
  const spec::JobSpec job = Example(GetParam().first, GetParam().second);
  const plan::Plan p = plan::MakePlan(job, Cat(), {});
  const sim::BuiltScenario s = sim::MakeScenario(job, Cat(), {});
  EXPECT_GT(p.checkpoint.mtti, 0);
  EXPECT_DOUBLE_EQ(p.checkpoint.mtti, s.info.mtti);
  EXPECT_DOUBLE_EQ(p.checkpoint.save_seconds, s.scenario.checkpoint_blocking);
  EXPECT_DOUBLE_EQ(p.checkpoint.interval, s.scenario.checkpoint_interval);
  EXPECT_DOUBLE_EQ(p.checkpoint.drain_seconds, s.info.drain);
  EXPECT_EQ(p.checkpoint.mtti_source, s.info.fault_source);
}

INSTANTIATE_TEST_SUITE_P(Examples, PlanAndSimAgree,
                         ::testing::Values(std::pair{"llama3-70b.toml", ""},
                                           std::pair{"llama3-405b-54d.toml", ""},
                                           std::pair{"llama3.1-405b.toml", "p5-512.toml"}));

TEST(FaultLoad, ClusterJobMttiRescalesTheCausesAndKeepsTheirMix) {
  // p5-512 states job_mtti = 150 min; the default fault set supplies the mix.
  const spec::JobSpec job = Example("llama3.1-405b.toml", "p5-512.toml");
  const FaultLoad load = ResolveFaultLoad(job, Cat());
  EXPECT_NEAR(load.mtti, 150 * 60, 1e-6);
  EXPECT_NE(load.source.find("rescaled to cluster.job_mtti"), std::string::npos) << load.source;
  const catalog::FaultSet* set = Cat().FindFaultSet("llama3-405b");
  ASSERT_NE(set, nullptr);
  ASSERT_EQ(load.causes.size(), set->causes.size());
  const double ratio = load.causes[0].rate_per_node_hour / set->causes[0].rate_per_node_hour;
  for (size_t i = 1; i < load.causes.size(); ++i) {
    EXPECT_NEAR(load.causes[i].rate_per_node_hour / set->causes[i].rate_per_node_hour, ratio,
                1e-9 * ratio);
  }
}

TEST(FaultLoad, SimPlaysOutTheStatedMtti) {
  const spec::JobSpec job = Example("llama3.1-405b.toml", "p5-512.toml");
  sim::ScenarioOptions o;
  o.horizon_seconds = 10 * 86400;
  sim::Scenario s = sim::MakeScenario(job, Cat(), o).scenario;
  const sim::TrialSummary t = sim::MonteCarlo(s, 20, 1, 1);
  // 10 days at one interruption per 150 min, less the time spent down.
  const double expected = 10 * 24 * 60 / 150.0;
  EXPECT_GT(t.interruptions.mean, 0.8 * expected);
  EXPECT_LT(t.interruptions.mean, 1.05 * expected);
}

}  // namespace
}  // namespace fmstack::resilience
