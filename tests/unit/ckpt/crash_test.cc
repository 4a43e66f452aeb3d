// Crash safety: a child process saves through two tiers while the parent
// SIGKILLs it, half the time at a random moment and half the time exactly at
// a step of the commit protocol (between data and manifest, after the
// manifest, during retention deletes, mid-drain). After every kill, the
// newest committed step of every tier must verify and hold exactly the state
// saved under that step, and restore must never pick an uncommitted copy.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <string_view>

#include "ckpt/engine.h"
#include "ckpt/restore.h"
#include "synthetic.h"

namespace fmstack::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::Loaded;
using testing::MakeState;
using testing::Matches;
using testing::SliceFor;
using testing::TargetsFor;

constexpr const char* kPoints[] = {"shard-written", "index-written", "manifest-written",
                                   "committed",     "removing",      "drained-chunk"};

std::vector<std::unique_ptr<Tier>> Tiers(const fs::path& root) {
  std::vector<std::unique_ptr<Tier>> t;
  t.push_back(MakePosixTier("local", (root / "local").string()));
  t.push_back(MakePosixTier("shared", (root / "shared").string()));
  return t;
}

// The child: saves steps first, first+1, ... until killed. With a fault
// point, kills itself at its `hit`-th occurrence on any tier.
[[noreturn]] void Child(const fs::path& root, int64_t first, std::string_view point, int hit) {
  EngineOptions o;
  o.keep = 2;
  o.chunk_bytes = 16384;
  int seen = 0;
  if (!point.empty()) {
    o.fault_point = [&](std::string_view p, const std::string&) {
      if (p == point && ++seen == hit) ::raise(SIGKILL);
    };
  }
  try {
    Engine engine(Tiers(root), o);
    for (int64_t step = first;; ++step) {
      engine.Save(SliceFor(MakeState(static_cast<uint64_t>(step), 30), step, 0, 1));
      if (step % 3 == 0) engine.Wait();
    }
  } catch (...) {
  }
  ::_exit(3);
}

TEST(CrashTest, LatestCommittedCheckpointAlwaysLoadsAfterSigkill) {
  const fs::path root = fs::temp_directory_path() / fmt::format("fmstack-crash-{}", ::getpid());
  fs::remove_all(root);
  Rng rng(2026);
  int64_t next = 1;
  int kills = 0, point_kills = 0, restores = 0;
  for (int round = 0; round < 220; ++round) {
    const bool at_point = round % 2 == 1;
    const std::string_view point = at_point ? kPoints[rng.Below(std::size(kPoints))] : "";
    const int hit = 1 + static_cast<int>(rng.Below(4));
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) Child(root, next, point, hit);
    if (!at_point) ::usleep(static_cast<useconds_t>(rng.Below(40000)));
    int status = 0;
    bool died = false;
    for (int waited = 0; at_point && waited < 300 && !died; waited += 2) {
      died = ::waitpid(pid, &status, WNOHANG) == pid;  // the point is reached within a few saves
      if (!died) ::usleep(2000);
    }
    if (died) ++point_kills;
    if (!died) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited on its own: " << WEXITSTATUS(status);
    ++kills;

    std::vector<std::unique_ptr<Tier>> tiers = Tiers(root);
    int64_t newest = 0;
    for (auto& tier : tiers) {
      std::optional<int64_t> latest;
      for (const StepListing& s : tier->List())
        if (s.committed) latest = s.step;
      if (!latest) continue;
      newest = std::max(newest, *latest);
      const std::vector<std::string> problems = VerifyCopy(*tier, *latest);
      ASSERT_TRUE(problems.empty())
          << "round " << round << " point " << point << ": " << problems.front();
    }
    std::vector<Tier*> all;
    for (auto& t : tiers) all.push_back(t.get());
    const testing::SyntheticState probe = MakeState(1, 30);
    Loaded l = TargetsFor(probe, 0, 1);
    const std::optional<RestoreResult> r = Restore(all, l.targets, nullptr);
    if (newest == 0) {
      EXPECT_FALSE(r.has_value());
      continue;
    }
    ASSERT_TRUE(r.has_value()) << "round " << round;
    EXPECT_EQ(r->step, newest);
    EXPECT_TRUE(Matches(MakeState(static_cast<uint64_t>(r->step), 30), l, 0, 1))
        << "round " << round << ": step " << r->step << " holds another state";
    ++restores;
    next = newest + 1;
  }
  std::cout << kills << " kills (" << point_kills << " at a protocol point), " << restores
            << " restores verified, " << next - 1 << " steps saved\n";
  EXPECT_GE(kills, 200);
  EXPECT_GT(point_kills, 80);
  EXPECT_GT(restores, 150);
  EXPECT_GT(next, 50);  // the run made progress between kills
  fs::remove_all(root);
}

}  // namespace
}  // namespace fmstack::ckpt
