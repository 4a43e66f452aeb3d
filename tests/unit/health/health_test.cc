#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "health/agent.h"
#include "health/burnin.h"
#include "health/checks.h"
#include "health/device.h"
#include "runtime/nodes.h"
#include "util/error.h"

namespace fmstack::health {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& tag) {
  const fs::path p =
      fs::temp_directory_path() / ("fmstack-health-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

CheckSpec Spec(const std::string& kind) {
  std::vector<CheckSpec> all = ParseCheckTable(DefaultCheckTableText(), "<built-in>");
  for (CheckSpec& c : all) {
    if (c.kind == kind) return c;
  }
  throw Error("no built-in check of kind " + kind);
}

TEST(CheckTable, TheBuiltInTableParsesAndCoversEveryKindButCommand) {
  const std::vector<CheckSpec> checks = ParseCheckTable(DefaultCheckTableText(), "<built-in>");
  std::set<std::string> kinds;
  for (const CheckSpec& c : checks) kinds.insert(c.kind);
  for (const std::string& k : CheckKinds()) {
    if (k != "command") {
      EXPECT_TRUE(kinds.contains(k)) << k;
    }
  }
  const CheckSpec xid = Spec("xid");
  EXPECT_EQ(xid.action, resilience::NodeAction::kReplace);
  EXPECT_NE(std::find(xid.codes.begin(), xid.codes.end(), 79), xid.codes.end());
}

TEST(CheckTable, MalformedTablesNameTheRowAndKey) {
  auto error = [](const std::string& text) {
    try {
      ParseCheckTable(text, "checks.toml");
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("[[check]]\nname = \"a\"\nkind = \"xid\"\ncodes = []\n").find("codes"),
            std::string::npos);
  EXPECT_NE(error("[[check]]\nname = \"a\"\nkind = \"nic\"\naction = \"explode\"\n").find("action"),
            std::string::npos);
  EXPECT_NE(
      error("[[check]]\nname = \"a\"\nkind = \"nic\"\n[[check]]\nname = \"a\"\nkind = \"disk\"\n")
          .find("used by two checks"),
      std::string::npos);
  EXPECT_NE(error("[[check]]\nname = \"a\"\nkind = \"disk\"\nmin_fre = \"1GB\"\n").find("min_fre"),
            std::string::npos);
  EXPECT_NE(
      error("[[check]]\nname = \"a\"\nkind = \"memory\"\ndeadline = \"0s\"\n").find("deadline"),
      std::string::npos);
  EXPECT_NE(error("[[check]]\nname = \"a\"\nkind = \"xid\"\n").find("checks.toml:"),
            std::string::npos);
}

TEST(Checks, FakeDevicesRaiseXidEccHeatAndLoss) {
  const std::string dir = TempDir("fake");
  ResetFakeDevices(dir, 2);
  NodeContext node;
  node.devices = OpenDevices("fake:" + dir);
  node.expect_devices = 2;
  EXPECT_EQ(node.devices->Count(), 2);
  for (const char* kind : {"xid", "ecc", "temperature", "gpu-present"})
    EXPECT_TRUE(RunCheck(Spec(kind), node).ok) << kind;
  RaiseOnFakeDevice(dir, 1, {{"xid", 79}});
  Outcome o = RunCheck(Spec("xid"), node);
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.reason, "xid 79 on gpu 1");
  RaiseOnFakeDevice(dir, 0, {{"ecc_dbe", 3}});
  EXPECT_FALSE(RunCheck(Spec("ecc"), node).ok);
  RaiseOnFakeDevice(dir, 0, {{"temperature_c", 99}});
  EXPECT_NE(RunCheck(Spec("temperature"), node).reason.find("99 C"), std::string::npos);
  fs::remove(dir + "/gpu1.json");
  o = RunCheck(Spec("gpu-present"), node);
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.reason.find("gpu 1 fell off the bus"), std::string::npos) << o.reason;
  ResetFakeDevices(dir, 2);  // a replaced node is healthy again
  EXPECT_TRUE(RunCheck(Spec("xid"), node).ok);
  fs::remove_all(dir);
}

TEST(Checks, HostChecksPassOnAHealthyMachineAndFailPastTheirLimits) {
  NodeContext node;
  node.run_dir = TempDir("host");
  EXPECT_TRUE(RunCheck(Spec("nic"), node).ok) << RunCheck(Spec("nic"), node).reason;
  EXPECT_TRUE(RunCheck(Spec("disk"), node).ok);
  CheckSpec disk = Spec("disk");
  disk.min_free_bytes = 1e18;  // an exabyte free: no disk has that
  EXPECT_FALSE(RunCheck(disk, node).ok);
  CheckSpec nic = Spec("nic");
  nic.interface = "fmstack-none0";
  EXPECT_EQ(RunCheck(nic, node).reason, "interface fmstack-none0 does not exist");
  CheckSpec mem = Spec("memory");
  mem.min_available_bytes = 1e18;
  EXPECT_FALSE(RunCheck(mem, node).ok);
  fs::remove_all(node.run_dir);
}

TEST(Checks, AStoppedWorkerIsReportedOnceItStaysStopped) {
  const pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  ::kill(child, SIGSTOP);
  // The stop takes effect when the child is next scheduled: wait for it.
  for (int i = 0; i < 200; ++i) {
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string text;
    std::getline(stat, text);
    if (text.find(") T") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CheckSpec spec = Spec("process");
  spec.stuck_seconds = 0.2;
  NodeContext node;
  node.pids = {{3, child}};
  std::map<int, double> since;
  EXPECT_TRUE(RunCheck(spec, node, &since).ok);  // first seen stopped: not yet stuck
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const Outcome o = RunCheck(spec, node, &since);
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.reason.find("rank 3"), std::string::npos) << o.reason;
  EXPECT_NE(o.reason.find("stopped (T)"), std::string::npos) << o.reason;
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

TEST(Agent, AHungCheckMissesItsDeadlineWithoutHangingTheAgent) {
  // gpu0.json as a FIFO nobody writes: opening it blocks, as a wedged
  // driver call would; a command that sleeps is killed at its deadline.
  const std::string dir = TempDir("hung");
  ASSERT_EQ(::mkfifo((dir + "/gpu0.json").c_str(), 0600), 0);
  NodeContext node;
  node.devices = OpenDevices("fake:" + dir);
  std::vector<CheckSpec> checks = ParseCheckTable(
      "[[check]]\nname = \"xid\"\nkind = \"xid\"\ncodes = [79]\ninterval = \"100ms\"\n"
      "deadline = \"200ms\"\naction = \"replace\"\n"
      "[[check]]\nname = \"slow\"\nkind = \"command\"\ncommand = [\"sleep\", \"30\"]\n"
      "deadline = \"200ms\"\n"
      "[[check]]\nname = \"mem\"\nkind = \"memory\"\ninterval = \"100ms\"\n",
      "hung.toml");
  Agent agent(checks, node);
  const double t0 = Now();
  std::map<std::string, Verdict> seen;
  int mem_runs = 0;
  while (Now() - t0 < 1.5) {
    for (const Verdict& v : agent.Tick(Now(), /*repeat_seconds=*/0.0)) {
      seen[v.check] = v;
      mem_runs += v.check == "mem";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(seen.contains("xid"));
  EXPECT_TRUE(seen["xid"].timed_out);
  EXPECT_EQ(seen["xid"].reason, "the xid check did not finish within 0.2 s (deadline)");
  ASSERT_TRUE(seen.contains("slow"));
  EXPECT_FALSE(seen["slow"].ok);
  EXPECT_NE(seen["slow"].reason.find("did not finish within 0.2 s"), std::string::npos);
  // The other checks kept their schedule meanwhile.
  EXPECT_GE(mem_runs, 1);
  EXPECT_TRUE(seen["mem"].ok);
  // Release the stuck reader so the test leaves no blocked thread behind.
  const int fd = ::open((dir + "/gpu0.json").c_str(), O_WRONLY | O_NONBLOCK);
  if (fd >= 0) ::close(fd);
  fs::remove_all(dir);
}

TEST(Agent, VerdictsRoundTripAndRejectGarbage) {
  const Verdict v{"nic-link", "nic", Severity::kCritical,      resilience::NodeAction::kReplace,
                  false,      false, "interface eth0 is down", 0.01};
  const Verdict back = VerdictFromJson(ToJson(v));
  EXPECT_EQ(back.check, v.check);
  EXPECT_EQ(back.action, v.action);
  EXPECT_EQ(back.reason, v.reason);
  EXPECT_THROW(VerdictFromJson({{"check", "x"}}), Error);
  nlohmann::json bad = ToJson(v);
  bad["action"] = "nuke";
  EXPECT_THROW(VerdictFromJson(bad), Error);
}

TEST(NodeNames, RangesAndListsExpandAndBadOnesAreNamed) {
  EXPECT_EQ(runtime::ExpandNodeNames({"node[0-2],node7"}),
            (std::vector<std::string>{"node0", "node1", "node2", "node7"}));
  EXPECT_EQ(runtime::ExpandNodeNames({"n[1,3-4]"}), (std::vector<std::string>{"n1", "n3", "n4"}));
  EXPECT_EQ(runtime::ExpandNodeNames({"node[0-25]"}).size(), 26u);
  EXPECT_THROW(runtime::ExpandNodeNames({"node[3-1]"}), Error);
  EXPECT_THROW(runtime::ExpandNodeNames({"node[a-b]"}), Error);
  EXPECT_THROW(runtime::ExpandNodeNames({"node[0-99999]"}), Error);
  EXPECT_THROW(runtime::ExpandNodeNames({"node1,,node2"}), Error);
}

TEST(Burnin, JudgesEachFigureAgainstTheExpectedShare) {
  const BurninFigures expected{100, 20, 0, ""};
  EXPECT_TRUE(Judge({80, 15, 1.2, ""}, expected, 0.7).pass);
  const BurninVerdict slow = Judge({50, 15, 0, ""}, expected, 0.7);
  EXPECT_FALSE(slow.pass);
  EXPECT_NE(slow.lines[0].find("FAIL"), std::string::npos);
  EXPECT_FALSE(Judge({100, 20, 0, "gemm: C[1,2] wrong"}, expected, 0.7).pass);
  // Nothing expected: only correctness decides.
  EXPECT_TRUE(Judge({1, 1, 0, ""}, {}, 0.7).pass);
}

TEST(Burnin, AHealthyNodeComputesRightAndMeasuresSomething) {
  const BurninFigures f = MeasureNode(0.2);
  EXPECT_EQ(f.problems, "");
  EXPECT_GT(f.gemm_gflops, 0);
  EXPECT_GT(f.memory_gbps, 0);
  EXPECT_EQ(BurninFiguresFromJson(ToJson(f)).gemm_gflops, f.gemm_gflops);
  EXPECT_THROW(BurninFiguresFromJson({{"gemm_gflops", "fast"}}), Error);
}

}  // namespace
}  // namespace fmstack::health
