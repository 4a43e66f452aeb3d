#include "resilience/policy.h"

#include <gtest/gtest.h>

namespace fmstack::resilience {
namespace {

using catalog::Recovery;

TEST(Policy, CheckpointRestartTakesASpareOrWaits) {
  const Policy p{Strategy::kCheckpointRestart};
  Action a = OnFault(p, {.dp_full = 8, .dp_active = 8, .spares_ready = 1}, {Recovery::kReplace});
  EXPECT_EQ(a.restore, Restore::kCheckpoint);
  EXPECT_EQ(a.placement, Placement::kSpare);
  a = OnFault(p, {.dp_full = 8, .dp_active = 8, .spares_ready = 0}, {Recovery::kReboot});
  EXPECT_EQ(a.placement, Placement::kWaitForNode);
  a = OnFault(p, {.dp_full = 8, .dp_active = 8, .spares_ready = 0}, {Recovery::kRestart});
  EXPECT_EQ(a.placement, Placement::kSameNode);
  EXPECT_FALSE(a.reason.empty());
}

TEST(Policy, CheckpointlessNeedsASecondReplica) {
  const Policy p{Strategy::kCheckpointless};
  EXPECT_EQ(OnFault(p, {8, 8, 1}, {Recovery::kReplace}).restore, Restore::kPeers);
  EXPECT_EQ(OnFault(p, {1, 1, 1}, {Recovery::kReplace}).restore, Restore::kCheckpoint);
}

TEST(Policy, SilentCorruptionAlwaysGoesBackToACheckpointFromBeforeIt) {
  for (Strategy s : {Strategy::kCheckpointRestart, Strategy::kCheckpointless, Strategy::kElastic}) {
    const Action a = OnFault({s}, {8, 8, 1}, {Recovery::kReplace, /*silent=*/true});
    EXPECT_EQ(a.restore, Restore::kCheckpoint) << StrategyName(s);
    EXPECT_TRUE(a.restore_before_fault);
  }
}

TEST(Policy, ElasticShrinksWithoutSpareDownToItsFloorThenWaits) {
  const Policy p{Strategy::kElastic, 0.5};
  Action a = OnFault(p, {8, 8, 0}, {Recovery::kReplace});
  EXPECT_EQ(a.placement, Placement::kDropReplica);
  EXPECT_EQ(a.restore, Restore::kNone);
  EXPECT_EQ(a.dp_after, 7);
  a = OnFault(p, {8, 4, 0}, {Recovery::kReplace});  // 3/8 < 0.5
  EXPECT_EQ(a.placement, Placement::kWaitForNode);
  EXPECT_EQ(a.restore, Restore::kPeers);
  a = OnFault(p, {8, 8, 2}, {Recovery::kReplace});  // a spare beats shrinking
  EXPECT_EQ(a.placement, Placement::kSpare);
  EXPECT_TRUE(ShouldGrow(p, {8, 7, 1}));
  EXPECT_FALSE(ShouldGrow(p, {8, 7, 0}));
  EXPECT_FALSE(ShouldGrow({Strategy::kCheckpointless}, {8, 7, 1}));
}

TEST(Policy, ElasticCountsEveryReplicaOfALostNode) {
  // A runtime node of 2 data-parallel ranks in a job of 4: dropping it
  // leaves 2 of 4, at the floor; a job of 2 ranks on one node cannot drop it.
  const Policy p{Strategy::kElastic, 0.5};
  Action a = OnFault(p, {4, 4, 0}, {.recovery = Recovery::kReplace, .replicas_lost = 2});
  EXPECT_EQ(a.placement, Placement::kDropReplica);
  EXPECT_EQ(a.dp_after, 2);
  EXPECT_NE(a.reason.find("2 replicas fewer"), std::string::npos) << a.reason;
  a = OnFault({Strategy::kElastic, 0.6}, {4, 4, 0},
              {.recovery = Recovery::kReplace, .replicas_lost = 2});
  EXPECT_EQ(a.placement, Placement::kWaitForNode);  // 2/4 < 0.6
  a = OnFault({Strategy::kElastic, 0.0}, {2, 2, 0},
              {.recovery = Recovery::kReplace, .replicas_lost = 2});
  EXPECT_EQ(a.placement, Placement::kWaitForNode);  // nobody would be left
  // Decide: a lost node takes all of its ranks, a crash only one process.
  const Decision lost = Decide(p, {4, 4, 0}, {}, {.kind = EventKind::kNodeLost, .rank = 2}, 2);
  EXPECT_EQ(lost.action.placement, Placement::kDropReplica);
  EXPECT_EQ(lost.action.dp_after, 2);
  const Decision crash = Decide(p, {4, 4, 0}, {}, {.kind = EventKind::kCrash, .rank = 2}, 2);
  EXPECT_EQ(crash.action.placement, Placement::kSameNode);
  EXPECT_EQ(crash.action.restore, Restore::kPeers);
}

TEST(Policy, MaintenanceLosesNothingAndPrefersSpares) {
  EXPECT_EQ(OnMaintenance({Strategy::kCheckpointRestart}, {8, 8, 1}).placement, Placement::kSpare);
  EXPECT_EQ(OnMaintenance({Strategy::kElastic}, {8, 8, 0}).placement, Placement::kDropReplica);
  EXPECT_EQ(OnMaintenance({Strategy::kCheckpointless}, {8, 8, 0}).placement,
            Placement::kWaitForNode);
}

TEST(CheckpointInterval, DalysHigherOrderFormula) {
  // C = 10 s, M = 5 h: sqrt(2CM) = 600 s, C/2M = 1/3600.
  const double r = 10.0 / (2 * 3600 * 5);
  EXPECT_NEAR(DalyInterval(10, 3600 * 5), 600 * (1 + std::sqrt(r) / 3 + r / 9) - 10, 1e-9);
  // Small saves: Young's first order, less (2/3) sqrt(C/2M) relative (3.5e-4 here).
  EXPECT_NEAR(DalyInterval(0.01, 3600 * 5) / YoungDaly(0.01, 3600 * 5), 1.0, 1e-3);
  EXPECT_LT(DalyInterval(0.01, 3600 * 5), YoungDaly(0.01, 3600 * 5));
  // A save as long as twice the MTTI: checkpoint once per MTTI.
  EXPECT_EQ(DalyInterval(7200, 3600), 3600);
  EXPECT_EQ(DalyInterval(10, 0), 0);
}

TEST(CheckpointInterval, DalyFlooredByTheDrain) {
  EXPECT_NEAR(CheckpointInterval(10, 3600 * 5, 0), DalyInterval(10, 3600 * 5), 1e-9);
  EXPECT_EQ(CheckpointInterval(0.01, 3600, 120), 120);
}

TEST(JobMtti, SumsTheCausesOverTheNodesUnlessTheClusterSaysSo) {
  std::vector<catalog::FaultCause> causes(2);
  causes[0].rate_per_node_hour = 0.001;
  causes[1].rate_per_node_hour = 0.003;
  EXPECT_NEAR(JobMtti(causes, 100, 0), 3600.0 / (0.004 * 100), 1e-9);
  EXPECT_EQ(JobMtti(causes, 100, 7200), 7200);
  EXPECT_EQ(JobMtti({}, 100, 0), 0);
}

RuntimeEvent Ev(EventKind k, int64_t step = 10) {
  return {.kind = k, .rank = 1, .step = step, .verified_step = 8};
}

TEST(Decide, ProcessFaultsRestartFromTheNewestCheckpointWithBackoff) {
  const Policy p{.max_restarts = 3, .backoff_seconds = 2, .backoff_max_seconds = 5};
  const JobView job{4, 4, 0};
  for (EventKind k : {EventKind::kCrash, EventKind::kHang, EventKind::kCheckpointFailed,
                      EventKind::kNodeLost, EventKind::kNonFinite}) {
    const Decision d = Decide(p, job, {}, Ev(k));
    EXPECT_EQ(d.verb, Verb::kRestart) << EventName(k);
    EXPECT_EQ(d.action.restore, Restore::kCheckpoint);
    EXPECT_EQ(d.max_restore_step, -1);
    EXPECT_EQ(d.backoff_seconds, 2);
  }
  EXPECT_EQ(Decide(p, job, {.restarts = 1}, Ev(EventKind::kCrash)).backoff_seconds, 4);
  EXPECT_EQ(Decide(p, job, {.restarts = 2}, Ev(EventKind::kCrash)).backoff_seconds, 5);
}

TEST(Decide, TheBudgetEndsTheRun) {
  const Policy p{.max_restarts = 2};
  const Decision d = Decide(p, {4, 4, 0}, {.restarts = 2}, Ev(EventKind::kCrash));
  EXPECT_EQ(d.verb, Verb::kStop);
  EXPECT_NE(d.reason.find("max_restarts"), std::string::npos) << d.reason;
  // A healthy job that must stop still saves first.
  EXPECT_EQ(Decide(p, {4, 4, 0}, {.restarts = 2}, Ev(EventKind::kNotice)).verb, Verb::kSaveAndStop);
}

TEST(Decide, SilentCorruptionRestoresNoNewerThanTheLastCheckedStep) {
  const Decision d = Decide({.max_restarts = 3}, {4, 4, 0}, {}, Ev(EventKind::kSilentCorruption));
  EXPECT_EQ(d.verb, Verb::kRestart);
  EXPECT_TRUE(d.action.restore_before_fault);
  EXPECT_EQ(d.max_restore_step, 8);
}

TEST(Decide, HealthyJobsSaveBeforeTheyStopOrMove) {
  const Policy p{.max_restarts = 3};
  EXPECT_EQ(Decide(p, {4, 4, 0}, {}, Ev(EventKind::kSignal)).verb, Verb::kSaveAndStop);
  EXPECT_EQ(Decide(p, {4, 4, 0}, {}, Ev(EventKind::kNotice)).verb, Verb::kSaveAndRestart);
  EXPECT_EQ(Decide(p, {4, 4, 0}, {}, Ev(EventKind::kStraggler)).verb, Verb::kSaveAndRestart);
  // A signal is obeyed whatever the budget.
  EXPECT_EQ(Decide({.max_restarts = 0}, {4, 4, 0}, {}, Ev(EventKind::kSignal)).verb,
            Verb::kSaveAndStop);
  // With the budget spent a node going away still saves and stops, but a
  // straggler, which trains correctly, carries on rather than fail the job.
  EXPECT_EQ(Decide({.max_restarts = 0}, {4, 4, 0}, {}, Ev(EventKind::kNotice)).verb,
            Verb::kSaveAndStop);
  EXPECT_EQ(Decide({.max_restarts = 0}, {4, 4, 0}, {}, Ev(EventKind::kStraggler)).verb,
            Verb::kCarryOn);
}

TEST(Decide, CheckpointlessReplacesLostRanksFromPeersAndNothingElse) {
  const Policy p{.strategy = Strategy::kCheckpointless, .max_restarts = 3};
  for (EventKind k : {EventKind::kCrash, EventKind::kHang, EventKind::kNodeLost}) {
    const Decision d = Decide(p, {4, 4, 0}, {}, Ev(k));
    EXPECT_EQ(d.verb, Verb::kRestart) << EventName(k);
    EXPECT_EQ(d.action.restore, Restore::kPeers) << EventName(k);
  }
  // No rank was lost: peers cannot fix a full disk or diverging numbers.
  for (EventKind k :
       {EventKind::kCheckpointFailed, EventKind::kNonFinite, EventKind::kSilentCorruption}) {
    EXPECT_EQ(Decide(p, {4, 4, 0}, {}, Ev(k)).action.restore, Restore::kCheckpoint) << EventName(k);
  }
  // A peer restore that failed falls back to the checkpoint, within the budget.
  const Decision fallback =
      Decide(p, {4, 4, 0}, {.restarts = 1}, Ev(EventKind::kPeerRestoreFailed));
  EXPECT_EQ(fallback.verb, Verb::kRestart);
  EXPECT_EQ(fallback.action.restore, Restore::kCheckpoint);
  EXPECT_NE(fallback.reason.find("newest checkpoint"), std::string::npos) << fallback.reason;
  // One replica: nobody to restore from.
  EXPECT_EQ(Decide(p, {1, 1, 0}, {}, Ev(EventKind::kCrash)).action.restore, Restore::kCheckpoint);
}

TEST(Decide, RestartsThatCompleteNoStepEndTheRunBeforeTheBudget) {
  const Policy p{.max_restarts = 1000, .max_futile_restarts = 3};
  EXPECT_EQ(
      Decide(p, {4, 4, 0}, {.restarts = 40, .futile_restarts = 2}, Ev(EventKind::kCrash)).verb,
      Verb::kRestart);
  const Decision d =
      Decide(p, {4, 4, 0}, {.restarts = 41, .futile_restarts = 3}, Ev(EventKind::kCrash));
  EXPECT_EQ(d.verb, Verb::kStop);
  EXPECT_NE(d.reason.find("completed no step"), std::string::npos) << d.reason;
}

TEST(Decide, TheSameNonFiniteStepTwiceIsDivergenceNotAFault) {
  const Decision d =
      Decide({.max_restarts = 3}, {4, 4, 0}, {.restarts = 1, .last_nonfinite_step = 10},
             Ev(EventKind::kNonFinite, 10));
  EXPECT_EQ(d.verb, Verb::kStop);
  EXPECT_NE(d.reason.find("diverges"), std::string::npos);
}

RuntimeEvent Unhealthy(NodeAction a) {
  return {.kind = EventKind::kNodeUnhealthy, .rank = 2, .step = 5, .node_action = a};
}

TEST(Decide, AnUnhealthyNodeToRebootOrReplaceLosesItsRanks) {
  const Policy p{.strategy = Strategy::kCheckpointless, .max_restarts = 3};
  const Decision replace = Decide(p, {4, 4, 1}, {}, Unhealthy(NodeAction::kReplace), 2);
  EXPECT_EQ(replace.verb, Verb::kRestart);
  EXPECT_EQ(replace.action.placement, Placement::kSpare);
  EXPECT_EQ(replace.action.restore, Restore::kPeers);
  // No spare: the rebooted node is waited for, from the newest checkpoint.
  const Decision reboot =
      Decide({.max_restarts = 3}, {4, 4, 0}, {}, Unhealthy(NodeAction::kReboot), 2);
  EXPECT_EQ(reboot.verb, Verb::kRestart);
  EXPECT_EQ(reboot.action.placement, Placement::kWaitForNode);
  EXPECT_EQ(RecoveryOf(Unhealthy(NodeAction::kReboot)), Recovery::kReboot);
  EXPECT_EQ(RecoveryOf(Unhealthy(NodeAction::kReplace)), Recovery::kReplace);
  // A check that asks for nothing changes nothing.
  EXPECT_EQ(Decide(p, {4, 4, 1}, {}, Unhealthy(NodeAction::kNone)).verb, Verb::kCarryOn);
}

TEST(Decide, ADrainedNodeIsLeftWithoutLoss) {
  // A spare: save, then move.
  const Decision spare =
      Decide({.max_restarts = 3}, {4, 4, 1}, {}, Unhealthy(NodeAction::kDrain), 2);
  EXPECT_EQ(spare.verb, Verb::kSaveAndRestart);
  EXPECT_EQ(spare.action.placement, Placement::kSpare);
  // Elastic with room: shrink by the node's two ranks, the peers hold their state.
  const Policy elastic{.strategy = Strategy::kElastic, .min_dp_fraction = 0.5, .max_restarts = 3};
  const Decision shrink = Decide(elastic, {4, 4, 0}, {}, Unhealthy(NodeAction::kDrain), 2);
  EXPECT_EQ(shrink.verb, Verb::kRestart);
  EXPECT_EQ(shrink.action.placement, Placement::kDropReplica);
  EXPECT_EQ(shrink.action.dp_after, 2);
  // No spare, no room, or no budget: the node keeps its ranks (a Slurm drain
  // lets the running job finish), the run is never stopped for it.
  EXPECT_EQ(Decide(elastic, {4, 2, 0}, {}, Unhealthy(NodeAction::kDrain), 2).verb, Verb::kCarryOn);
  EXPECT_EQ(Decide({.max_restarts = 3}, {4, 4, 0}, {}, Unhealthy(NodeAction::kDrain), 2).verb,
            Verb::kCarryOn);
  const Decision spent =
      Decide({.max_restarts = 1}, {4, 4, 1}, {.restarts = 1}, Unhealthy(NodeAction::kDrain), 2);
  EXPECT_EQ(spent.verb, Verb::kCarryOn);
  EXPECT_NE(spent.reason.find("budget"), std::string::npos) << spent.reason;
}

TEST(NodeAction, NamesRoundTrip) {
  for (NodeAction a :
       {NodeAction::kNone, NodeAction::kDrain, NodeAction::kReboot, NodeAction::kReplace})
    EXPECT_EQ(ParseNodeAction(NodeActionName(a)), a);
  EXPECT_FALSE(ParseNodeAction("reimage"));
  EXPECT_EQ(ParseEventName("node-unhealthy"), EventKind::kNodeUnhealthy);
}

TEST(Strategy, NamesRoundTrip) {
  for (Strategy s : {Strategy::kCheckpointRestart, Strategy::kCheckpointless, Strategy::kElastic}) {
    EXPECT_EQ(ParseStrategy(StrategyName(s)), s);
  }
  EXPECT_FALSE(ParseStrategy("bogus"));
}

}  // namespace
}  // namespace fmstack::resilience
