// plan and sim read a job's MTTI, blocking save and interval from one place
// (resilience/job_model.h), and sim plays out the cluster's stated MTTI.
#include <gtest/gtest.h>

#include <cmath>
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

FaultLoad OneCause(catalog::Recovery recovery, double rate_per_node_hour, double away_hours) {
  catalog::FaultCause c;
  c.name = "node";
  c.recovery = recovery;
  c.rate_per_node_hour = rate_per_node_hour;
  c.out_of_service_seconds = away_hours * 3600;
  FaultLoad load;
  load.causes.push_back(c);
  return load;
}

TEST(NodesAway, LittlesLawAndThePoissonTail) {
  // 100 nodes, one fault per 1,000 node-hours, each away 40 h: 4 away on average.
  FaultLoad load = OneCause(catalog::Recovery::kReplace, 1e-3, 40);
  NodesAway a = NodesOutOfService(load, 100, 4);
  EXPECT_NEAR(a.mean, 4.0, 1e-12);
  EXPECT_EQ(a.spares_99, 9);                     // Poisson(4): P(<= 8) 0.979, P(<= 9) 0.992
  EXPECT_NEAR(a.beyond_spares, 0.371163, 1e-5);  // 1 - P(<= 4)
  EXPECT_FALSE(SparesWarning(a, 4).empty());
  EXPECT_TRUE(SparesWarning(NodesOutOfService(load, 100, 9), 9).empty());
  // Planned maintenance keeps a node away for its window; a restart does not.
  load.planned_per_node_hour = 1e-3;
  load.causes.push_back(OneCause(catalog::Recovery::kRestart, 1.0, 5).causes[0]);
  a = NodesOutOfService(load, 100, 0);
  EXPECT_NEAR(a.mean, 4.0 + 100 * 1e-3 * kPlannedOutOfService / 3600, 1e-12);
  // A million accelerators' worth of nodes: the tail is still found, without underflow.
  a = NodesOutOfService(OneCause(catalog::Recovery::kReplace, 1e-3, 16), 125000, 0);
  EXPECT_NEAR(a.mean, 2000, 1e-9);
  EXPECT_NEAR(static_cast<double>(a.spares_99), 2000 + 2.326 * std::sqrt(2000.0), 3);
  EXPECT_NEAR(a.beyond_spares, 1.0, 1e-12);
}

// The estimate is what the simulated cluster lives through: with the spares
// it names, the job almost never waits for a node; with half as many, it
// waits a good share of the time.
TEST(NodesAway, SimWaitsOnlyWhenTheSparesFallShort) {
  spec::JobSpec job = Example("llama3.1-405b.toml", "p5-512.toml");
  sim::ScenarioOptions o;
  o.horizon_seconds = 20 * 86400;
  const sim::BuiltScenario built = sim::MakeScenario(job, Cat(), o);
  const NodesAway away = built.info.nodes_away;
  ASSERT_GT(away.mean, 1.0);
  const auto waiting_share = [&](int64_t spares) {
    sim::Scenario s = built.scenario;
    s.spare_nodes = spares;
    const sim::TrialSummary t = sim::MonteCarlo(s, 20, 1, 1);
    return t.badput_mean.waiting / t.wall.mean;
  };
  EXPECT_LT(waiting_share(away.spares_99), 0.02);
  EXPECT_GT(waiting_share(static_cast<int64_t>(away.mean / 2)), 0.10);
}

}  // namespace
}  // namespace fmstack::resilience
