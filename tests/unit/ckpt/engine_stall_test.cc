// The engine under faults of its tiers: a slower tier that stalls, a first
// tier that hangs, removals of old steps that are slow or fail.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "ckpt/engine.h"
#include "ckpt/restore.h"
#include "hooked_tier.h"
#include "synthetic.h"
#include "util/error.h"

namespace fmstack::ckpt {
namespace {

using testing::HookedTier;
using testing::Loaded;
using testing::MakeState;
using testing::Matches;
using testing::SliceFor;
using testing::TargetsFor;

// A fresh directory under the system's temporary one, removed when the
// test ends (passed or not).
struct ScratchDir {
  explicit ScratchDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path path;
};

// A slower tier that stalls on every write, as an object store that stopped
// answering does (within its request timeouts).
std::unique_ptr<Tier> StallingTier(std::unique_ptr<Tier> inner) {
  return std::make_unique<HookedTier>(std::move(inner), "object", [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  });
}

TEST(EngineDrain, ASlowTierIsLeftBehindAtTheDeadlineAndNeverStopsTheRun) {
  const ScratchDir scratch("fmstack-stall");
  const std::filesystem::path& root = scratch.path;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> problems;
  {
    EngineOptions o;
    o.chunk_bytes = 65536;  // ~50 chunks: 15 s to drain at 0.3 s a chunk
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(MakePosixTier("local", (root / "local").string()));
    tiers.push_back(StallingTier(MakePosixTier("o", (root / "object").string())));
    Engine engine(std::move(tiers), o);
    engine.Save(testing::SliceFor(testing::MakeState(3, 200), 1, 0, 1));
    problems = engine.Wait(0.5);
    // The fast copy is committed whatever the slow tier does.
    EXPECT_EQ(engine.tiers()[0]->List().back().committed, true);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("did not finish draining within 0.5 s"), std::string::npos)
      << problems[0];
  // Not a speed threshold: without abandoning, the destructor would wait for
  // the whole 15 s drain.
  EXPECT_LT(seconds, 10);
}

// A first tier whose writes hang (a hung disk) while Save() streams through
// a pool smaller than the state: Save() gives up at the slot deadline with
// an error naming the tier and file, the checkpoint committed before stays
// committed, and once the disk answers again the next save commits.
TEST(EngineStall, SaveGivesUpWaitingForASlotAndKeepsWhatWasCommitted) {
  const ScratchDir scratch("fmstack-hung");
  const std::filesystem::path& root = scratch.path;
  std::mutex mu;
  std::condition_variable cv;
  bool hung = false;
  auto gate = [&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return !hung; });
  };
  {
    EngineOptions o;
    o.chunk_bytes = 4096;
    o.pool_bytes = 2 * 4096;  // the state is ~19 chunks: Save() must wait for slots
    o.slot_timeout_seconds = 0.3;
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(
        std::make_unique<HookedTier>(MakePosixTier("l", (root / "local").string()), "local", gate));
    Engine engine(std::move(tiers), o);
    const auto state = testing::MakeState(3, 200);
    engine.Save(testing::SliceFor(state, 1, 0, 1));
    EXPECT_TRUE(engine.Wait(30).empty());
    {
      const std::lock_guard lock(mu);
      hung = true;
    }
    try {
      engine.Save(testing::SliceFor(state, 2, 0, 1));
      FAIL() << "expected the save to be abandoned";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("step-00000002 abandoned"), std::string::npos) << m;
      EXPECT_NE(m.find("staging slot"), std::string::npos) << m;
      EXPECT_NE(m.find("local tier"), std::string::npos) << m;
      EXPECT_NE(m.find((root / "local").string()), std::string::npos) << m;
    }
    {
      const std::lock_guard lock(mu);
      hung = false;
    }
    cv.notify_all();
    EXPECT_TRUE(engine.Wait(30).empty()) << "reported once, by Save()";
    engine.Save(testing::SliceFor(state, 3, 0, 1));
    EXPECT_TRUE(engine.Wait(30).empty());
    std::vector<int64_t> committed;
    for (const StepListing& l : engine.tiers()[0]->List()) {
      if (l.committed) committed.push_back(l.step);
    }
    EXPECT_EQ(committed, (std::vector<int64_t>{1, 3}));
  }
}

// A first tier whose writes block while `hung` is set, as a disk or file
// system that stopped answering does.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool hung = false;
  void Pass() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return !hung; });
  }
  void Set(bool h) {
    {
      const std::lock_guard lock(mu);
      hung = h;
    }
    cv.notify_all();
  }
};

std::vector<int64_t> CommittedSteps(Tier& tier) {
  std::vector<int64_t> out;
  for (const StepListing& l : tier.List()) {
    if (l.committed) out.push_back(l.step);
  }
  return out;
}

TEST(EngineStall, WaitGivesUpOnAHungFirstTierAndKeepsWhatWasCommitted) {
  const ScratchDir scratch("fmstack-hung-wait");
  const std::filesystem::path& root = scratch.path;
  Gate gate;
  {
    EngineOptions o;
    o.chunk_bytes = 4096;
    // Long enough for step 1's write and fsync on a busy machine.
    o.write_timeout_seconds = 2;
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(std::make_unique<HookedTier>(MakePosixTier("l", (root / "local").string()),
                                                 "local", [&] { gate.Pass(); }));
    Engine engine(std::move(tiers), o);
    const auto state = testing::MakeState(3, 200);
    engine.Save(testing::SliceFor(state, 1, 0, 1));
    EXPECT_TRUE(engine.Wait(30).empty());
    gate.Set(true);
    engine.Save(testing::SliceFor(state, 2, 0, 1));  // the pool holds it: returns at once
    try {
      engine.Wait(30);
      FAIL() << "expected Wait() to give up on the hung tier";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("step-00000002 not committed"), std::string::npos) << m;
      EXPECT_NE(m.find("local tier did not finish writing"), std::string::npos) << m;
      EXPECT_NE(m.find((root / "local").string()), std::string::npos) << m;
      EXPECT_NE(m.find("within 2 s"), std::string::npos) << m;
    }
    gate.Set(false);
    EXPECT_TRUE(engine.Wait(30).empty()) << "reported once, by the Wait() that gave up";
    engine.Save(testing::SliceFor(state, 3, 0, 1));
    EXPECT_TRUE(engine.Wait(30).empty());
    EXPECT_EQ(CommittedSteps(*engine.tiers()[0]), (std::vector<int64_t>{1, 3}));
    testing::Loaded loaded = testing::TargetsFor(state, 0, 1);
    const std::optional<RestoreResult> r = engine.Restore(loaded.targets);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->step, 3);
    EXPECT_TRUE(testing::Matches(state, loaded, 0, 1));
  }
}

TEST(EngineStall, DestructorAbandonsAWriteThatOutlivesTheDeadline) {
  const ScratchDir scratch("fmstack-hung-dtor");
  const std::filesystem::path& root = scratch.path;
  Gate gate;
  std::vector<std::string> log;
  std::mutex log_mu;
  std::thread opener;
  {
    EngineOptions o;
    o.chunk_bytes = 4096;
    o.write_timeout_seconds = 0.3;
    o.log = [&](const std::string& line) {
      const std::lock_guard lock(log_mu);
      log.push_back(line);
    };
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(std::make_unique<HookedTier>(MakePosixTier("l", (root / "local").string()),
                                                 "local", [&] { gate.Pass(); }));
    Engine engine(std::move(tiers), o);
    const auto state = testing::MakeState(3, 200);
    gate.Set(true);
    engine.Save(testing::SliceFor(state, 1, 0, 1));
    // The disk answers again well after the destructor's deadline.
    opener = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      gate.Set(false);
    });
  }
  opener.join();
  bool noted = false;
  for (const std::string& l : log) {
    noted |= l.find("local tier did not finish writing within 0.3 s") != std::string::npos;
  }
  EXPECT_TRUE(noted);
  const std::unique_ptr<Tier> tier = MakePosixTier("l", (root / "local").string());
  EXPECT_TRUE(CommittedSteps(*tier).empty());
}

// Removing old steps runs beside the writer, not in its way: while the
// first tier's removal of an old step is held, the next save still
// commits. (Were the removal on the writer's thread, the held removal would
// hold that commit until its safety deadline, and the test would fail.)
TEST(EngineRetention, ASlowRemovalDoesNotHoldTheNextCommit) {
  const ScratchDir scratch("fmstack-retain");
  const std::filesystem::path& root = scratch.path;
  std::mutex mu;
  std::condition_variable cv;
  bool removing = false, released = false;
  std::vector<int64_t> committed_while_removing;
  {
    EngineOptions o;
    o.keep = 1;
    o.chunk_bytes = 4096;
    o.on_committed = [&](int64_t step, const std::string&, double) {
      const std::lock_guard lock(mu);
      if (removing) committed_while_removing.push_back(step);
      if (step == 3) released = true;
      cv.notify_all();
    };
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(std::make_unique<HookedTier>(
        MakePosixTier("local", (root / "local").string()), "local", [] {},
        [&](int64_t step) {
          std::unique_lock lock(mu);
          if (step != 1) return;  // hold only the first removal
          removing = true;
          cv.notify_all();
          cv.wait_for(lock, std::chrono::seconds(60), [&] { return released; });
          removing = false;
        }));
    Engine engine(std::move(tiers), o);
    engine.Save(SliceFor(MakeState(1, 30), 1, 0, 1));
    engine.Wait();
    engine.Save(SliceFor(MakeState(2, 30), 2, 0, 1));  // its commit removes step 1
    {
      std::unique_lock lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return removing; }))
          << "step 1 was never removed";
    }
    engine.Save(SliceFor(MakeState(3, 30), 3, 0, 1));
    EXPECT_TRUE(engine.Wait().empty());
    // Wait() returned after the removals too: only the newest step is left.
    std::vector<int64_t> steps;
    for (const StepListing& s : engine.tiers()[0]->List()) steps.push_back(s.step);
    EXPECT_EQ(steps, std::vector<int64_t>{3});
  }
  EXPECT_EQ(committed_while_removing, std::vector<int64_t>{3});
}

// A step that cannot be removed is reported, and only that: the step just
// committed stands, Wait() returns the line instead of throwing, the next
// save goes ahead, and a later pass removes what is left once it can.
TEST(EngineRetention, AFailedRemovalIsReportedAndNeverFailsTheCommittedStep) {
  const ScratchDir scratch("fmstack-retain-fail");
  const std::filesystem::path& root = scratch.path;
  std::atomic<bool> refuse{true};
  EngineOptions o;
  o.keep = 1;
  o.chunk_bytes = 4096;
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::make_unique<HookedTier>(
      MakePosixTier("local", (root / "local").string()), "local", [] {},
      [&](int64_t step) {
        if (refuse) throw Error(fmt::format("step {}: permission denied (injected)", step));
      }));
  Engine engine(std::move(tiers), o);
  engine.Save(SliceFor(MakeState(1, 30), 1, 0, 1));
  EXPECT_TRUE(engine.Wait().empty());
  engine.Save(SliceFor(MakeState(2, 30), 2, 0, 1));
  const std::vector<std::string> lines = engine.Wait();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("local tier: older steps not removed"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("step 1: permission denied (injected)"), std::string::npos) << lines[0];
  std::vector<std::pair<int64_t, bool>> steps;
  for (const StepListing& s : engine.tiers()[0]->List()) steps.emplace_back(s.step, s.committed);
  EXPECT_EQ(steps, (std::vector<std::pair<int64_t, bool>>{{1, true}, {2, true}}));

  refuse = false;
  EXPECT_NO_THROW(engine.Save(SliceFor(MakeState(3, 30), 3, 0, 1)));
  EXPECT_TRUE(engine.Wait().empty());
  std::vector<int64_t> left;
  for (const StepListing& s : engine.tiers()[0]->List()) left.push_back(s.step);
  EXPECT_EQ(left, std::vector<int64_t>{3});
  const testing::SyntheticState want = MakeState(3, 30);
  Loaded l = TargetsFor(want, 0, 1);
  const std::optional<RestoreResult> r = engine.Restore(l.targets);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 3);
}

}  // namespace
}  // namespace fmstack::ckpt
