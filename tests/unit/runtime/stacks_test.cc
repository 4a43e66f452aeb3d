#include "runtime/stacks.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fmstack::runtime {
namespace {

// A child that sleeps in nanosleep until killed, as a hung rank would wait.
class Sleeper {
 public:
  Sleeper() : pid_(::fork()) {
    if (pid_ == 0) {
      ::execlp("sleep", "sleep", "60", static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Sleeper() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  Sleeper(const Sleeper&) = delete;
  Sleeper& operator=(const Sleeper&) = delete;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
};

TEST(Stacks, AStoppedProcessGivesItsBacktraceAndStaysStopped) {
  Sleeper child;
  ASSERT_GT(child.pid(), 0);
  ::usleep(200 * 1000);  // let it reach nanosleep
  ASSERT_EQ(::kill(child.pid(), SIGSTOP), 0);
  const Stacks s = CaptureStacks(child.pid(), 30);
  ASSERT_TRUE(s.ok) << s.why << "\n" << s.text;
  EXPECT_NE(s.text.find("#0 "), std::string::npos) << s.text;
  EXPECT_NE(s.text.find("nanosleep"), std::string::npos) << s.text;
  // gdb detached and left it as the hang left it: stopped, not gone.
  int status = 0;
  EXPECT_EQ(::waitpid(child.pid(), &status, WNOHANG | WUNTRACED | WCONTINUED), child.pid());
  EXPECT_TRUE(WIFSTOPPED(status)) << status;
}

TEST(Stacks, AProcessThatIsNotThereIsAnErrorThatSaysSo) {
  pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  const Stacks s = CaptureStacks(gone, 30);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.why.find("gdb"), std::string::npos) << s.why;
}

// Without gdb on PATH the error says what to install, and no second try
// (with debug information) is made with the same missing program.
TEST(Stacks, WithoutGdbTheErrorSaysToInstallIt) {
  Sleeper child;
  const std::string path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  ::setenv("PATH", "/nonexistent", 1);
  const Stacks s = CaptureStacks(child.pid(), 30);
  ::setenv("PATH", path.c_str(), 1);
  EXPECT_FALSE(s.ok);
  EXPECT_FALSE(s.started);
  EXPECT_NE(s.why.find("install gdb"), std::string::npos) << s.why;
  EXPECT_EQ(s.why.find("debug information"), std::string::npos) << s.why;
}

}  // namespace
}  // namespace fmstack::runtime
