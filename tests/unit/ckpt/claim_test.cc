// What a checkpoint directory belongs to: Tier::Claim refuses a second job
// (naming both) and a second writer of the same job; removal spares step
// directories the engine did not write; step names are parsed with bounds.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "ckpt/format.h"
#include "ckpt/tier.h"
#include "util/error.h"

namespace fmstack::ckpt {
namespace {

namespace fs = std::filesystem;

class ClaimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("fmstack-claim-{}-{}", ::getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(ClaimTest, ASecondJobIsRefusedWithBothNames) {
  const TierOwner a{"/runs/a", "job 'a' (run directory /runs/a)"};
  const TierOwner b{"/runs/b", "job 'b' (run directory /runs/b)"};
  {
    auto tier = MakePosixTier("local", root_.string());
    tier->Claim(a, /*lock=*/true);
    tier->Claim(a, /*lock=*/false);  // another rank of the same job
  }
  auto again = MakePosixTier("local", root_.string());
  EXPECT_EQ(ErrorOf([&] { again->Claim(a, true); }), "") << "a rerun of job a is job a";
  const std::string e = ErrorOf([&] { MakePosixTier("local", root_.string())->Claim(b, false); });
  EXPECT_NE(e.find("is the checkpoint directory of job 'a' (run directory /runs/a)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("this job is job 'b' (run directory /runs/b)"), std::string::npos) << e;
  EXPECT_NE(e.find((root_ / "OWNER").string()), std::string::npos) << "names the way out: " << e;
}

// In another process: 0 when its claim with the lock was refused as a
// second writer, 1 when it was let in, 2 on another error.
int ClaimInAChild(const std::string& root, const TierOwner& owner) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    try {
      MakePosixTier("local", root)->Claim(owner, true);
      ::_exit(1);
    } catch (const Error& e) {
      ::_exit(std::string(e.what()).find(fmt::format("is being written by another process of {} "
                                                     "(pid {})",
                                                     owner.describe, ::getppid())) !=
                      std::string::npos
                  ? 0
                  : 2);
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 3;
}

TEST_F(ClaimTest, TwoWritersOfOneJobAreRefused) {
  const TierOwner a{"/runs/a", "job 'a'"};
  auto first = MakePosixTier("local", root_.string());
  first->Claim(a, true);
  EXPECT_EQ(ClaimInAChild(root_.string(), a), 0) << "a second process was let in";
  // Another handle of the same process (a loader beside its saver) is let in.
  EXPECT_EQ(ErrorOf([&] { MakePosixTier("local", root_.string())->Claim(a, true); }), "");
  first.reset();  // the first writer ends: the lock is free
  EXPECT_EQ(ClaimInAChild(root_.string(), a), 1);
}

TEST_F(ClaimTest, AnOwnerRecordThatIsNotOursIsRefused) {
  fs::create_directories(root_);
  std::ofstream(root_ / "OWNER") << "my notes\n";
  const std::string e = ErrorOf([&] {
    MakePosixTier("local", root_.string())->Claim({"/x", "job 'x'"}, false);
  });
  EXPECT_NE(e.find("not an owner record"), std::string::npos) << e;
}

TEST_F(ClaimTest, RemovalSparesWhatTheEngineDidNotWrite) {
  auto tier = MakePosixTier("local", root_.string());
  const fs::path ours = root_ / StepDirName(3), theirs = root_ / StepDirName(4);
  fs::create_directories(ours);
  fs::create_directories(theirs);
  for (const fs::path& d : {ours, theirs}) {
    std::ofstream(d / RankFileName(0)) << "x";
    std::ofstream(d / (RankIndexName(0) + ".tmp")) << "{}";
  }
  std::ofstream(theirs / "notes.txt") << "a user's file";
  tier->Remove(3);
  EXPECT_FALSE(fs::exists(ours));
  EXPECT_THROW(tier->Remove(4), ForeignStep);
  EXPECT_TRUE(fs::exists(theirs / "notes.txt"));
  EXPECT_TRUE(fs::exists(theirs / RankFileName(0)));
}

TEST(StepNames, AreParsedWithBounds) {
  EXPECT_EQ(ParseStepDirName("step-00000012"), 12);
  EXPECT_EQ(ParseStepDirName("step-999999999999999999"), 999999999999999999);  // 18 digits
  EXPECT_EQ(ParseStepDirName("step-99999999999999999999"), std::nullopt);      // would wrap
  EXPECT_EQ(ParseStepDirName("step-"), std::nullopt);
  EXPECT_EQ(ParseStepDirName("step-12a"), std::nullopt);
  EXPECT_TRUE(IsEngineFileName("manifest.json"));
  EXPECT_TRUE(IsEngineFileName("COMMITTED.tmp"));
  EXPECT_TRUE(IsEngineFileName("rank-00003.index.json"));
  EXPECT_FALSE(IsEngineFileName("rank-.index.json"));
  EXPECT_FALSE(IsEngineFileName("notes.txt"));
}

}  // namespace
}  // namespace fmstack::ckpt
