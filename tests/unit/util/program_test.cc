#include "util/program.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <string>

namespace fmstack {
namespace {

TEST(RunProgram, CapturesStdoutAndStderrAndTheExitStatus) {
  const ProgramResult ok = RunProgram({"sh", "-c", "echo out; echo err >&2"}, 30);
  EXPECT_TRUE(ok.ok) << ok.how;
  EXPECT_FALSE(ok.timed_out);
  EXPECT_EQ(ok.output, "out\nerr\n");
  EXPECT_EQ(ok.how, "exited 0");

  const ProgramResult failed = RunProgram({"sh", "-c", "echo no; exit 3"}, 30);
  EXPECT_FALSE(failed.ok);
  EXPECT_EQ(failed.how, "exited 3");
  EXPECT_EQ(failed.output, "no\n");
}

TEST(RunProgram, PassesTheEnvironmentGivenOverTheProcesses) {
  const ProgramResult r = RunProgram({"sh", "-c", "echo \"$FMSTACK_TEST_VALUE\""}, 30,
                                     {{"FMSTACK_TEST_VALUE", "from the caller"}});
  EXPECT_EQ(r.output, "from the caller\n");
}

TEST(RunProgram, SaysWhenTheProgramIsMissing) {
  const ProgramResult r = RunProgram({"fmstack-no-such-program"}, 30);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.how, "could not start (not found?)");
  EXPECT_EQ(RunProgram({}, 30).how, "could not start: no program");
}

TEST(RunProgram, KeepsOnlyTheFirstBytesOfALongOutput) {
  const ProgramResult r = RunProgram({"sh", "-c", "head -c 100000 /dev/zero"}, 30, {}, 1000);
  EXPECT_TRUE(r.ok) << r.how;
  EXPECT_EQ(r.output.size(), 1000u);
}

// A program that outlives its deadline is killed with the children it
// started (its process group), and the call returns at the deadline, not
// when the program would have finished.
TEST(RunProgram, KillsTheProgramAndItsChildrenAtTheDeadline) {
  const std::string pid_file = ::testing::TempDir() + "/fmstack_program_child.pid";
  std::remove(pid_file.c_str());
  const auto start = std::chrono::steady_clock::now();
  const ProgramResult r =
      RunProgram({"sh", "-c", "sleep 60 & echo $! > " + pid_file + "; echo started; wait"}, 0.5);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.how, "did not finish within 0.5 s (deadline); killed");
  EXPECT_EQ(r.output, "started\n");
  EXPECT_LT(took, 30) << "returned when the program ended, not at its deadline";
  std::ifstream in(pid_file);
  pid_t child = 0;
  ASSERT_TRUE(in >> child) << pid_file;
  // The sleeping child was in the killed group: it is gone (or a zombie
  // about to be reaped by init) within a few seconds.
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string line;
    gone = !std::getline(stat, line) || line.find(") Z ") != std::string::npos;
    if (!gone) ::usleep(50000);
  }
  EXPECT_TRUE(gone) << "child " << child << " outlived the deadline";
  if (!gone) ::kill(child, SIGKILL);
}

}  // namespace
}  // namespace fmstack
