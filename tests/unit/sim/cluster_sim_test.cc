#include "sim/cluster_sim.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sim/faults.h"
#include "sim/monte_carlo.h"

namespace fmstack::sim {
namespace {

catalog::FaultCause Cause(catalog::Recovery r, double mtbf_hours, double away_hours = 24,
                          bool silent = false, double detect = 60) {
  catalog::FaultCause c;
  c.name = "c";
  c.component = "gpu";
  c.recovery = r;
  c.rate_per_node_hour = 1 / mtbf_hours;
  c.detect_seconds = detect;
  c.out_of_service_seconds = away_hours * 3600;
  c.silent = silent;
  return c;
}

Scenario Base() {
  Scenario s;
  s.job_nodes = 64;
  s.spare_nodes = 4;
  s.dp = 8;
  s.step_seconds = 10;
  s.horizon_seconds = 30 * 86400;
  s.checkpoint_interval = 1800;
  s.checkpoint_blocking = 5;
  s.tiers = {{"local", 20, 10, true}, {"shared", 120, 120, false}};
  s.restart_seconds = 300;
  s.peer_rebuild_seconds = 30;
  s.peer_restore_seconds = 5;
  s.causes = {Cause(catalog::Recovery::kReplace, 2000), Cause(catalog::Recovery::kRestart, 4000)};
  return s;
}

double Ledger(const RunResult& r) {
  return r.work + r.badput.total();
}

TEST(ClusterSim, EverySecondIsBookedAsWorkOrBadput) {
  for (auto strategy : {resilience::Strategy::kCheckpointRestart,
                        resilience::Strategy::kCheckpointless, resilience::Strategy::kElastic}) {
    for (int64_t spares : {0, 4}) {
      Scenario s = Base();
      s.policy.strategy = strategy;
      s.spare_nodes = spares;
      s.planned_per_node_hour = 1e-4;
      s.causes.push_back(Cause(catalog::Recovery::kReboot, 5000, 1));
      s.causes.push_back(Cause(catalog::Recovery::kReplace, 50000, 48, /*silent=*/true, 3600));
      for (uint64_t seed = 1; seed <= 5; ++seed) {
        const RunResult r = Simulate(s, seed);
        EXPECT_NEAR(Ledger(r), r.wall, 1e-6 * r.wall)
            << resilience::StrategyName(strategy) << " spares " << spares << " seed " << seed;
        EXPECT_GT(r.interruptions, 0);
        EXPECT_GE(r.badput.lost_work, 0);
      }
    }
  }
}

TEST(ClusterSim, WithoutFaultsOnlyCheckpointStallsAreLost) {
  Scenario s = Base();
  s.causes.clear();
  const RunResult r = Simulate(s, 1);
  EXPECT_EQ(r.interruptions, 0);
  const double saves = std::floor(s.horizon_seconds / s.checkpoint_interval);
  EXPECT_NEAR(r.badput.checkpoint, saves * s.checkpoint_blocking, s.checkpoint_blocking);
  EXPECT_NEAR(r.ettr(), 1 - s.checkpoint_blocking / s.checkpoint_interval, 1e-3);
}

TEST(ClusterSim, FinishesTheWorkAndReportsTimeToTrain) {
  Scenario s = Base();
  s.work_seconds = 5 * 86400;
  const RunResult r = Simulate(s, 3);
  EXPECT_TRUE(r.finished);
  EXPECT_NEAR(r.work, s.work_seconds, 1e-6 * s.work_seconds);
  EXPECT_GT(r.wall, s.work_seconds);
}

TEST(ClusterSim, SameSeedSameResultDifferentSeedDifferentFaults) {
  const Scenario s = Base();
  const RunResult a = Simulate(s, 7), b = Simulate(s, 7), c = Simulate(s, 8);
  EXPECT_EQ(a.interruptions, b.interruptions);
  EXPECT_DOUBLE_EQ(a.work, b.work);
  EXPECT_NE(a.work, c.work);
}

TEST(ClusterSim, InterruptionCountIsPoissonAroundTheRate) {
  Scenario s = Base();
  s.spare_nodes = 1000;  // never short of nodes
  s.causes = {Cause(catalog::Recovery::kRestart, 1000)};
  const double expected = static_cast<double>(s.job_nodes) * s.horizon_seconds / 3600 / 1000;
  const TrialSummary t = MonteCarlo(s, 64, 1, 2);
  // The mean of 64 Poisson counts: sd = sqrt(expected / 64).
  EXPECT_NEAR(t.interruptions.mean, expected, 4 * std::sqrt(expected / 64));
}

TEST(ClusterSim, CheckpointlessLosesLessWorkThanCheckpointRestart) {
  Scenario s = Base();
  const TrialSummary restart = MonteCarlo(s, 16, 5, 2);
  s.policy.strategy = resilience::Strategy::kCheckpointless;
  const TrialSummary peers = MonteCarlo(s, 16, 5, 2);
  EXPECT_LT(peers.badput_mean.lost_work, restart.badput_mean.lost_work / 10);
  EXPECT_LT(peers.badput_mean.restart, restart.badput_mean.restart);
  EXPECT_GT(peers.ettr.mean, restart.ettr.mean);
  EXPECT_DOUBLE_EQ(peers.interruptions.mean, restart.interruptions.mean);  // the same faults
}

TEST(ClusterSim, WithoutSparesElasticShrinksWhileOthersWait) {
  Scenario s = Base();
  s.spare_nodes = 0;
  s.causes = {Cause(catalog::Recovery::kReplace, 500, 12)};
  const TrialSummary wait = MonteCarlo(s, 8, 2, 2);
  s.policy.strategy = resilience::Strategy::kElastic;
  const TrialSummary elastic = MonteCarlo(s, 8, 2, 2);
  EXPECT_GT(wait.badput_mean.waiting, 0);
  EXPECT_GT(elastic.shrinks, 0);
  EXPECT_GT(elastic.badput_mean.degraded, 0);
  EXPECT_GT(elastic.ettr.mean, wait.ettr.mean);
}

TEST(ClusterSim, SilentCorruptionRollsBackPastItselfUsingMilestones) {
  Scenario s = Base();
  s.causes = {Cause(catalog::Recovery::kReplace, 1e9, 24, /*silent=*/true, 2 * 3600)};
  s.causes[0].rate_per_node_hour = 1.0 / (64 * 24);  // about one a day
  s.keep = 2;                                        // two 30-min checkpoints: 1 h of history
  s.milestone_interval = 3600;
  const RunResult with = Simulate(s, 4);
  s.milestone_interval = 0;
  const RunResult without = Simulate(s, 4);
  ASSERT_GT(with.interruptions, 3);
  EXPECT_EQ(with.from_scratch, 0);
  EXPECT_GT(without.from_scratch, 0);  // a 2-h-late detection outlives 1 h of retention
  EXPECT_LT(with.badput.lost_work, without.badput.lost_work);
}

TEST(ClusterSim, ReplacedNodeWithoutLocalReplicaRestoresFromTheSharedTier) {
  Scenario s = Base();
  s.causes = {Cause(catalog::Recovery::kReplace, 500)};
  s.local_replica = true;
  const RunResult replica = Simulate(s, 9);
  s.local_replica = false;
  const RunResult shared = Simulate(s, 9);
  EXPECT_GT(shared.badput.restart, replica.badput.restart);      // 120 s reads instead of 10 s
  EXPECT_GT(shared.badput.lost_work, replica.badput.lost_work);  // older: shared drains later
}

TEST(FaultStream, ThinsNothingAndPicksCausesByRate) {
  std::vector<catalog::FaultCause> causes = {Cause(catalog::Recovery::kRestart, 100),
                                             Cause(catalog::Recovery::kRestart, 300)};
  FaultStream f(causes, 0, 10, 42);
  int first = 0, n = 40000;
  double last = 0;
  for (int i = 0; i < n; ++i) {
    const FaultEvent e = f.Next();
    EXPECT_GT(e.time, last);
    last = e.time;
    first += e.cause == 0;
  }
  EXPECT_NEAR(static_cast<double>(first) / n, 0.75, 0.01);
  // Rate: 10 nodes x (1/100 + 1/300) per hour.
  EXPECT_NEAR(last / 3600 / n, 1 / (10 * (0.01 + 1.0 / 300)), 0.02 * 7.5);
}

}  // namespace
}  // namespace fmstack::sim
