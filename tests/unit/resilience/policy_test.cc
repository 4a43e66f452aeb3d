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

TEST(Policy, MaintenanceLosesNothingAndPrefersSpares) {
  EXPECT_EQ(OnMaintenance({Strategy::kCheckpointRestart}, {8, 8, 1}).placement, Placement::kSpare);
  EXPECT_EQ(OnMaintenance({Strategy::kElastic}, {8, 8, 0}).placement, Placement::kDropReplica);
  EXPECT_EQ(OnMaintenance({Strategy::kCheckpointless}, {8, 8, 0}).placement,
            Placement::kWaitForNode);
}

TEST(ChooseRestore, NewestCommittedValidReachableFromTheFastestTier) {
  const std::vector<CheckpointCopy> copies = {
      {.step = 100, .tier = 0, .committed = true},
      {.step = 100, .tier = 1, .committed = true},
      {.step = 200, .tier = 0, .committed = true, .reachable = false},  // replaced node's disk
      {.step = 200, .tier = 1, .committed = true},
      {.step = 300, .tier = 0, .committed = false},                 // still draining
      {.step = 250, .tier = 1, .committed = true, .valid = false},  // after the corruption
  };
  const std::optional<size_t> pick = ChooseRestore(copies);
  ASSERT_TRUE(pick);
  EXPECT_EQ(*pick, 3u);
  EXPECT_FALSE(ChooseRestore(std::vector<CheckpointCopy>{{.committed = false}}));
}

TEST(CheckpointInterval, YoungDalyFlooredByTheDrain) {
  EXPECT_NEAR(CheckpointInterval(10, 3600 * 5, 0), std::sqrt(2 * 10 * 3600 * 5.0), 1e-9);
  EXPECT_EQ(CheckpointInterval(0.01, 3600, 120), 120);
}

TEST(Strategy, NamesRoundTrip) {
  for (Strategy s : {Strategy::kCheckpointRestart, Strategy::kCheckpointless, Strategy::kElastic}) {
    EXPECT_EQ(ParseStrategy(StrategyName(s)), s);
  }
  EXPECT_FALSE(ParseStrategy("bogus"));
}

}  // namespace
}  // namespace fmstack::resilience
