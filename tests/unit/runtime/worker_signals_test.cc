// Worker::CoordinateSignals: a termination signal is reported to the
// supervisor instead of ending the process; after the supervisor's
// "terminate" it ends the process as the signal's default would.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>

#include "runtime/control.h"
#include "runtime/worker.h"

namespace fmstack::runtime {
namespace {

using std::chrono::milliseconds;

// The next event named `ev` the worker sent on `fd`, within 5 s.
std::optional<nlohmann::json> NextEvent(int fd, LineReader& reader, const std::string& ev) {
  char buf[4096];
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return std::nullopt;
    for (const std::string& line : reader.Feed(buf, static_cast<size_t>(n))) {
      std::optional<nlohmann::json> m = ParseLine(line);
      if (m && m->value("ev", "") == ev) return m;
    }
  }
  return std::nullopt;
}

TEST(WorkerSignals, ATerminationSignalIsReportedAndTheProcessGoesOn) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  {
    Worker w(sv[1], milliseconds(1000));
    w.CoordinateSignals();
    LineReader reader;
    for (const int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) {
      ASSERT_EQ(::kill(::getpid(), sig), 0);
      const std::optional<nlohmann::json> m = NextEvent(sv[0], reader, "signal");
      ASSERT_TRUE(m) << "no report of signal " << sig;
      EXPECT_EQ((*m)["sig"], sig);
    }
  }
  // The handlers are restored: SIGUSR1's default ends a process again.
  struct sigaction now {};
  ::sigaction(SIGUSR1, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
  ::close(sv[0]);
  ::close(sv[1]);
}

TEST(WorkerSignalsDeathTest, AfterTerminateTheSignalEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        int sv[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) ::_exit(2);
        Worker w(sv[1], milliseconds(1000));
        w.CoordinateSignals();
        SendLine(sv[0], {{"cmd", "terminate"}});
        ::kill(::getpid(), SIGTERM);
        ::sleep(10);  // the worker's thread ends the process first
        ::_exit(3);
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

}  // namespace
}  // namespace fmstack::runtime
