// The supervisor with stand-in workers (shell scripts on the control channel).
#include "runtime/supervisor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

namespace fmstack::runtime {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& tag) {
  const fs::path p =
      fs::temp_directory_path() / ("fmstack-supervisor-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// One stand-in worker: a bash script with the control channel on
// $FMSTACK_CONTROL_FD, in run directory `dir`.
SuperviseOptions OneStandIn(const std::string& dir, const std::string& name,
                            const std::string& script) {
  SuperviseOptions o;
  o.layout = {.nodes = 1, .procs_per_node = 1};
  o.argv = {"/bin/bash", "-c", script};
  o.run_dir = dir;
  o.job_name = name;
  o.job_id = "1";
  o.grace_seconds = 1;
  o.metrics_listen = "off";
  return o;
}

// A worker reports why it stops on its control channel, then exits. The
// supervisor's poll() can see the channel empty just before the report lands
// and reap the exit right after: the report must still be what it believes.
// The stand-in writes a line to stderr first; the line callback holds the
// supervisor there, between its poll() and its waitpid(), while the worker
// reports and exits.
TEST(Supervisor, AReportSentJustBeforeTheExitIsBelieved) {
  const std::string dir = FreshDir("report");
  SuperviseOptions o =
      OneStandIn(dir, "report",
                 "echo about to report >&2; sleep 0.2; "
                 "printf '%s\\n' '{\"ev\":\"fault\",\"kind\":\"peer-restore-failed\",\"rank\":0,"
                 "\"step\":0,\"what\":\"no peer copy could serve\"}' >&\"$FMSTACK_CONTROL_FD\"; "
                 "exit 75");
  o.policy = {.max_restarts = 0};
  const RunResult r = Supervise(
      o, nullptr,
      [](int, bool is_stderr, const std::string& line) {
        if (is_stderr && line == "about to report")
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      },
      nullptr);
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(r.exits.size(), 1u);
  EXPECT_EQ(r.exits[0].exit_code, kFaultExitCode);
  ASSERT_FALSE(r.ledger.incidents().empty());
  EXPECT_EQ(r.ledger.incidents().front().kind, "peer-restore-failed");
  EXPECT_EQ(r.ledger.incidents().front().what, "no peer copy could serve");
  fs::remove_all(dir);
}

// Elastic: node 1 goes down and the survivor (rank 0) is told to go on in
// the smaller world. It finds no usable peer copy at once and reports it in
// the new generation, while the supervisor still waits out the restart
// backoff before it calls the shrink done. The report must outlive that
// bookkeeping: the incident is the failed peer restore, and the fallback is
// the newest checkpoint. `stay` is how long the survivor lives after its
// report: within the backoff, or past it.
RunResult ShrinkWhosePeerRestoreFails(const std::string& dir, double stay) {
  // The restart from the checkpoint finds the mark and ends the run.
  const std::string script = "MARK='" + dir + "/attempted'; STAY=" + std::to_string(stay) + "\n" +
                             R"(if [ "$RANK" = 1 ]; then exec sleep 30; fi
if [ -e "$MARK" ]; then exit 0; fi
touch "$MARK"
while read -r -t 20 -u "$FMSTACK_CONTROL_FD" line; do
  case "$line" in *'"rejoin"'*) break ;; esac
done
gen=$(printf '%s' "$line" | sed -n 's/.*"generation":\([0-9]*\).*/\1/p')
printf '{"ev":"fault","kind":"peer-restore-failed","rank":0,"step":0,"gen":%s,"what":"no peer copy could serve"}\n' "$gen" >&"$FMSTACK_CONTROL_FD"
sleep "$STAY"; exit 75)";
  SuperviseOptions o = OneStandIn(dir, "shrink", script);
  o.layout = {.nodes = 2, .procs_per_node = 1};
  o.policy = {.strategy = resilience::Strategy::kElastic,
              .max_restarts = 3,
              .backoff_seconds = 2,
              .backoff_max_seconds = 2};
  o.inject = {{.id = "down", .kind = "node-down", .rank = 1, .at_step = 0}};
  return Supervise(o, nullptr, nullptr, nullptr);
}

void ExpectPeerRestoreFailedAfterTheShrink(const RunResult& r) {
  EXPECT_TRUE(r.ok()) << r.failure;
  const auto& incidents = r.ledger.incidents();
  ASSERT_EQ(incidents.size(), 2u);
  EXPECT_EQ(incidents[0].kind, "node-lost");
  EXPECT_EQ(incidents[1].kind, "peer-restore-failed");
  EXPECT_EQ(incidents[1].what, "no peer copy could serve");
  EXPECT_GE(incidents[0].detect_seconds, 0) << "the injected node-down";
  EXPECT_LT(incidents[1].detect_seconds, 0) << "not injected: no time from an injection";
}

TEST(Supervisor, ASurvivorThatFailsItsShrinkAndStopsAtOnceIsBelieved) {
  const std::string dir = FreshDir("shrink-now");
  ExpectPeerRestoreFailedAfterTheShrink(ShrinkWhosePeerRestoreFails(dir, 0));
  fs::remove_all(dir);
}

TEST(Supervisor, ASurvivorThatFailsItsShrinkAndStopsAfterTheBackoffIsBelieved) {
  const std::string dir = FreshDir("shrink-later");
  ExpectPeerRestoreFailedAfterTheShrink(ShrinkWhosePeerRestoreFails(dir, 3));
  fs::remove_all(dir);
}

// A worker's message with a field of the wrong type is said and dropped;
// the supervisor goes on, and the worker's clean exit ends the run well.
TEST(Supervisor, AMessageWithAFieldOfTheWrongTypeIsSaidAndIgnored) {
  const std::string dir = FreshDir("badfield");
  const SuperviseOptions o =
      OneStandIn(dir, "badfield",
                 "printf '%s\\n' '{\"ev\":\"collective-failed\",\"generation\":\"one\"}' "
                 "'{\"ev\":\"fault\",\"kind\":\"crash\",\"step\":\"twelve\"}' "
                 "'{\"ev\":\"fault\",\"kind\":\"crash\",\"step\":1,\"gen\":\"two\"}' "
                 "'{\"ev\":\"hb\",\"step\":1,\"phase\":\"train\"}' >&\"$FMSTACK_CONTROL_FD\"; "
                 "sleep 0.5; exit 0");
  std::vector<std::string> notes;
  const RunResult r =
      Supervise(o, nullptr, nullptr, [&](const std::string& line) { notes.push_back(line); });
  EXPECT_TRUE(r.ok()) << r.failure;
  int said = 0;
  for (const std::string& n : notes) {
    if (n.find("has a field of the wrong type") != std::string::npos) ++said;
  }
  EXPECT_EQ(said, 3) << "the collective-failed and the two fault messages";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fmstack::runtime
