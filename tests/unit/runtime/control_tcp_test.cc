// The TCP control channel of workers on other hosts, and the Slurm helpers
// that need no cluster: scontrol's key=value lines, srun's words.
#include "runtime/control_tcp.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

#include "cluster/slurm.h"
#include "runtime/control.h"
#include "util/error.h"

namespace fmstack::runtime {
namespace {

using std::chrono::milliseconds;

// Drives the listener until `n` connections joined or `deadline` passed.
std::vector<ControlListener::Joined> Pump(ControlListener& l, size_t n,
                                          std::vector<std::string>* refused,
                                          milliseconds deadline = milliseconds(5000)) {
  std::vector<ControlListener::Joined> joined;
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (joined.size() < n && std::chrono::steady_clock::now() < until) {
    for (const auto& j : l.Advance(refused)) joined.push_back(j);
    if (refused->size() >= n) break;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return joined;
}

TEST(ControlTcp, BothSidesProveTheSecretAndLinesFlow) {
  ControlListener l("127.0.0.1", "s3cret");
  auto dial = std::async(std::launch::async, [&] {
    return DialControl(l.address(), "s3cret", 3, 7, milliseconds(5000));
  });
  std::vector<std::string> refused;
  const auto joined = Pump(l, 1, &refused);
  const int worker = dial.get();
  ASSERT_EQ(joined.size(), 1u) << (refused.empty() ? "" : refused[0]);
  EXPECT_EQ(joined[0].slot, 3);
  EXPECT_EQ(joined[0].generation, 7);
  ASSERT_TRUE(SendLine(worker, {{"ev", "hb"}, {"step", 5}}));
  char buf[256];
  ssize_t n = -1;
  for (int i = 0; i < 200 && n <= 0; ++i) {
    n = ::read(joined[0].fd, buf, sizeof buf);
    if (n <= 0) std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_GT(n, 0);
  LineReader r;
  const auto lines = r.Feed(buf, static_cast<size_t>(n));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(ParseLine(lines[0])->value("step", 0), 5);
  ::close(worker);
  ::close(joined[0].fd);
}

TEST(ControlTcp, AWrongSecretIsRefusedOnBothSides) {
  ControlListener l("127.0.0.1", "right");
  auto dial = std::async(std::launch::async, [&] {
    try {
      ::close(DialControl(l.address(), "wrong", 0, 0, milliseconds(3000)));
      return std::string("connected");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  });
  std::vector<std::string> refused;
  const auto joined = Pump(l, 1, &refused);
  EXPECT_TRUE(joined.empty());
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_NE(refused[0].find("wrong secret"), std::string::npos) << refused[0];
  const std::string said = dial.get();
  EXPECT_NE(said.find(l.address()), std::string::npos) << said;
  EXPECT_EQ(said.find("connected"), std::string::npos);
}

TEST(ControlTcp, NobodyListeningFailsByTheDeadlineNamingTheAddress) {
  std::string address;
  {
    ControlListener gone("127.0.0.1", "x");
    address = gone.address();
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    DialControl(address, "x", 0, 0, milliseconds(300));
    FAIL() << "connected to nothing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(address), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(ControlTcp, AMalformedHelloIsRefused) {
  ControlListener l("127.0.0.1", "x");
  const std::string addr = l.address();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1))));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_TRUE(SendLine(fd, {{"slot", "zero"}}));
  std::vector<std::string> refused;
  EXPECT_TRUE(Pump(l, 1, &refused).empty());
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_NE(refused[0].find("malformed hello"), std::string::npos) << refused[0];
  ::close(fd);
  EXPECT_THROW(DialControl("not-an-address", "x", 0, 0, milliseconds(10)), Error);
}

TEST(Slurm, ScontrolFieldsKeepSpacesInValues) {
  const std::string line =
      "NodeName=sn2 Arch=x86_64 NodeAddr=10.77.0.12 State=DOWN* Reason=Not responding "
      "[slurm@2026-11-24T02:20:00] Comment=(null)";
  EXPECT_EQ(cluster::ScontrolField(line, "NodeName"), "sn2");
  EXPECT_EQ(cluster::ScontrolField(line, "NodeAddr"), "10.77.0.12");
  EXPECT_EQ(cluster::ScontrolField(line, "Reason"), "Not responding [slurm@2026-11-24T02:20:00]");
  EXPECT_EQ(cluster::ScontrolField(line, "Comment"), "(null)");
  EXPECT_EQ(cluster::ScontrolField(line, "Addr"), "");  // not a suffix of NodeAddr
  EXPECT_EQ(cluster::ScontrolField(line, "Missing"), "");
}

TEST(Slurm, JobStatesThatEndTheJob) {
  cluster::JobStatus s;
  EXPECT_TRUE(s.finished());  // forgotten by Slurm
  s.known = true;
  for (const char* st : {"PENDING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING"}) {
    s.state = st;
    EXPECT_FALSE(s.finished()) << st;
  }
  for (const char* st : {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT"}) {
    s.state = st;
    EXPECT_TRUE(s.finished()) << st;
  }
}

TEST(Slurm, SrunRunsOneTaskOnTheNamedHostOfTheJob) {
  cluster::SlurmAllocation a;
  a.job_id = "42";
  const auto w = cluster::SrunPrefix(a, {"sn3", "10.0.0.3"}, "tiny.node1");
  ASSERT_FALSE(w.empty());
  EXPECT_EQ(w.front(), "srun");
  EXPECT_EQ(w.back(), "--");
  auto has = [&](const std::string& x) { return std::find(w.begin(), w.end(), x) != w.end(); };
  EXPECT_TRUE(has("--jobid=42"));
  EXPECT_TRUE(has("--nodelist=sn3"));
  EXPECT_TRUE(has("--ntasks=1"));
  EXPECT_TRUE(has("--job-name=tiny.node1"));
}

TEST(Slurm, ProbeNamesTheHostThatDoesNotAnswer) {
  // 192.0.2.0/24 is TEST-NET-1: nothing answers there.
  const auto why = cluster::ProbeSlurmd({{"a", "192.0.2.1"}, {"b", "bogus"}}, 0.2);
  ASSERT_EQ(why.size(), 2u);
  EXPECT_NE(why[0].find("192.0.2.1:6818"), std::string::npos) << why[0];
  EXPECT_NE(why[1].find("not an address"), std::string::npos) << why[1];
}

}  // namespace
}  // namespace fmstack::runtime
