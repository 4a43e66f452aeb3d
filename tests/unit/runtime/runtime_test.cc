#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "metrics/goodput.h"
#include "runtime/control.h"
#include "runtime/inject.h"
#include "runtime/monitor.h"
#include "util/error.h"

namespace fmstack::runtime {
namespace {

using std::chrono::milliseconds;

// corrupt-checkpoint waits while the save it is after, the newest at or
// before its step, is uncommitted (CI once reached step 12 before step 10's
// commit, and the fault found nothing to corrupt); a later save that has
// begun does not count, and neither does an older committed one.
TEST(Inject, TheNewestCheckpointByTheStepMustBeCommitted) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(::testing::TempDir()) / "inject_newest";
  fs::remove_all(root);
  const std::string tier = root.string();
  EXPECT_FALSE(NewestCheckpointCommitted(tier, 12)) << "no directory yet";
  fs::create_directories(root);
  EXPECT_FALSE(NewestCheckpointCommitted(tier, 12)) << "nothing saved yet";
  fs::create_directories(root / "step-00000005");
  std::ofstream(root / "step-00000005" / "COMMITTED") << "";
  fs::create_directories(root / "step-00000010");  // saved at step 10, not yet on disk
  EXPECT_FALSE(NewestCheckpointCommitted(tier, 12));
  EXPECT_TRUE(NewestCheckpointCommitted(tier, 9)) << "a fault at step 9 is after step 5's save";
  std::ofstream(root / "step-00000010" / "COMMITTED") << "";
  fs::create_directories(root / "step-00000015");  // the next save has begun
  fs::create_directories(root / "stepping-stone");
  EXPECT_TRUE(NewestCheckpointCommitted(tier, 12));
  EXPECT_FALSE(NewestCheckpointCommitted(tier, 15));
  // The corruption goes to the same checkpoint: step 10's, not 5's or 15's.
  std::ofstream(root / "step-00000010" / "rank-00001.safetensors") << std::string(64, 'x');
  std::ofstream(root / "step-00000015" / "COMMITTED") << "";
  std::ofstream(root / "step-00000015" / "rank-00001.safetensors") << std::string(64, 'x');
  EXPECT_EQ(CorruptNewestShard(tier, 1, 12),
            (root / "step-00000010" / "rank-00001.safetensors").string());
  fs::remove_all(root);
}

TEST(RankMonitor, NamesTheSilentRankNotItsWaitingPeers) {
  const Clock::time_point t0{};
  RankMonitor m(4, {.heartbeat_timeout = 3}, t0);
  for (int r = 0; r < 4; ++r) m.OnHeartbeat(r, 5, "train", t0 + milliseconds(100));
  // Rank 2 stops; the others keep beating while they wait for it.
  for (int r : {0, 1, 3}) m.OnHeartbeat(r, 5, "train", t0 + milliseconds(3000));
  EXPECT_FALSE(m.Hung(t0 + milliseconds(3000)));
  const std::optional<SilentRank> h = m.Hung(t0 + milliseconds(3200));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->rank, 2);
  EXPECT_NEAR(h->silent_seconds, 3.1, 1e-9);
  EXPECT_EQ(h->step, 5);
}

TEST(RankMonitor, AProgramThatNeverBeatsIsNeverHung) {
  const Clock::time_point t0{};
  const RankMonitor m(2, {.heartbeat_timeout = 1}, t0);
  EXPECT_FALSE(m.Hung(t0 + std::chrono::hours(1)));
}

TEST(RankMonitor, AStragglerIsSlowForStepsInARow) {
  RankMonitor m(4, {.straggler_factor = 2, .straggler_steps = 3}, Clock::time_point{});
  auto step = [&](int64_t s, double slow) {
    for (int r = 0; r < 4; ++r) m.OnStep(r, s, r == 3 ? slow : 0.1);
  };
  step(1, 0.5);
  step(2, 0.5);
  step(3, 0.15);  // the streak breaks
  step(4, 0.5);
  step(5, 0.5);
  EXPECT_FALSE(m.Straggler());
  step(6, 0.5);
  ASSERT_TRUE(m.Straggler());
  EXPECT_EQ(*m.Straggler(), 3);
  EXPECT_EQ(m.MaxStep(), 6);
}

TEST(RankMonitor, StepsArriveInAnyOrder) {
  RankMonitor m(2, {.straggler_factor = 2, .straggler_steps = 1}, Clock::time_point{});
  m.OnStep(0, 1, 0.1);
  m.OnStep(0, 2, 0.1);
  EXPECT_FALSE(m.Straggler());
  m.OnStep(1, 1, 0.1);
  m.OnStep(1, 2, 0.9);
  ASSERT_TRUE(m.Straggler());
  EXPECT_EQ(*m.Straggler(), 1);
}

// A stalled main thread keeps its heartbeats: the others' failed
// collectives name it, as soon as it is the only live rank that said nothing.
TEST(RankMonitor, AStalledRankIsTheOneWhosePeersCollectivesFailedWithoutIt) {
  const Clock::time_point t0{};
  RankMonitor m(4, {.heartbeat_timeout = 3}, t0);
  for (int r = 0; r < 4; ++r) m.OnHeartbeat(r, r == 2 ? 12 : 13, "train", t0);
  EXPECT_FALSE(m.Stalled(t0, 5)) << "no collective failed yet";
  m.OnCollectiveFailed(0, t0 + milliseconds(20000));
  m.OnCollectiveFailed(3, t0 + milliseconds(20010));
  EXPECT_FALSE(m.Stalled(t0 + milliseconds(20010), 5)) << "ranks 1 and 2 may both be late";
  m.OnCollectiveFailed(1, t0 + milliseconds(20050));
  m.OnCollectiveFailed(1, t0 + milliseconds(20060));  // the first report counts
  const std::optional<StalledRank> s = m.Stalled(t0 + milliseconds(20100), 5);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 2);
  EXPECT_EQ(s->step, 12);
  EXPECT_EQ(s->phase, "train");
  EXPECT_EQ(s->waiting, (std::vector<int>{0, 1, 3}));
  EXPECT_NEAR(s->waited_seconds, 0.1, 1e-9);
  EXPECT_FALSE(m.Hung(t0 + milliseconds(2000))) << "it is not silent";
}

TEST(RankMonitor, AfterTheGraceTheSilentRankFurthestBehindIsStalled) {
  const Clock::time_point t0{};
  RankMonitor m(4, {}, t0);
  for (int r = 0; r < 4; ++r) m.OnHeartbeat(r, r == 3 ? 7 : 8, "train", t0);
  m.OnCollectiveFailed(0, t0 + milliseconds(1000));
  m.OnCollectiveFailed(1, t0 + milliseconds(1000));
  EXPECT_FALSE(m.Stalled(t0 + milliseconds(5999), 5));
  const std::optional<StalledRank> s = m.Stalled(t0 + milliseconds(6000), 5);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 3) << "rank 2 is at step 8, rank 3 at step 7";
}

TEST(RankMonitor, NoRankIsStalledWhenEveryLiveRanksCollectiveFailed) {
  const Clock::time_point t0{};
  RankMonitor m(3, {}, t0);
  m.OnCollectiveFailed(0, t0);
  m.OnCollectiveFailed(2, t0);
  m.OnExit(1);  // an exited rank is the exits' business, not a stall
  EXPECT_FALSE(m.Stalled(t0 + std::chrono::hours(1), 5));
  // A replacement begins a new generation: its failures are counted afresh.
  m.OnReplaced(1, t0);
  m.OnCollectiveFailed(0, t0 + milliseconds(10));
  EXPECT_FALSE(m.Stalled(t0 + milliseconds(10), 5));
  m.OnCollectiveFailed(1, t0 + milliseconds(20));
  const std::optional<StalledRank> s = m.Stalled(t0 + milliseconds(20), 5);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 2);
}

TEST(LineReader, SplitsAndBoundsLines) {
  LineReader r;
  EXPECT_TRUE(r.Feed("{\"a\":", 5).empty());
  const std::vector<std::string> lines = r.Feed("1}\n{}\nx", 7);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "{\"a\":1}");
  EXPECT_EQ(ParseLine(lines[0])->at("a"), 1);
  EXPECT_FALSE(ParseLine("not json"));
  EXPECT_FALSE(ParseLine("[1,2]"));
  const std::string huge(kMaxControlLine + 1, 'x');
  EXPECT_THROW(r.Feed(huge.data(), huge.size()), Error);
}

TEST(Ledger, RollBackMovesStepsToLostAndEverySecondIsBooked) {
  metrics::Ledger l;
  for (int64_t s = 1; s <= 10; ++s) l.Step(s, 0.5);
  l.Book("detection", 1);
  EXPECT_EQ(l.RollBack(7), 3);
  EXPECT_DOUBLE_EQ(l.Get("lost"), 1.5);
  EXPECT_DOUBLE_EQ(l.Get("productive"), 3.5);
  for (int64_t s = 8; s <= 10; ++s) l.Step(s, 0.5);
  l.SetWall(10);
  double sum = 0;
  for (const std::string& b : metrics::Ledger::Buckets()) sum += l.Get(b);
  EXPECT_DOUBLE_EQ(sum, 10);
  EXPECT_DOUBLE_EQ(l.Goodput(), 0.5);
  l.incidents().push_back({.kind = "crash",
                           .rank = 2,
                           .step = 10,
                           .detect_seconds = 0.01,
                           .decision = "restart",
                           .what = "rank 2 was killed"});
  const metrics::Ledger back = metrics::Ledger::FromJson(l.ToJson());
  EXPECT_DOUBLE_EQ(back.Get("lost"), 1.5);
  EXPECT_DOUBLE_EQ(back.Get("productive"), 5);
  ASSERT_EQ(back.incidents().size(), 1u);
  EXPECT_EQ(back.incidents()[0].rank, 2);
}

}  // namespace
}  // namespace fmstack::runtime
