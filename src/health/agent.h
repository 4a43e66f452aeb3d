// health: the node agent's scheduler. Each check of the table runs on its
// own thread at its interval; the agent waits for none of them. A check that
// outlives its deadline is reported as failed ("did not finish within N s"),
// and is not started again until the stuck run returns, so a hung probe (a
// dead NFS mount, a wedged driver call) costs one thread, never the agent.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "health/checks.h"

namespace fmstack::health {

struct Verdict {
  std::string check, kind;
  Severity severity = Severity::kCritical;
  resilience::NodeAction action = resilience::NodeAction::kNone;
  bool ok = true;
  bool timed_out = false;  // failed because it missed its deadline
  std::string reason;
  double seconds = 0;  // how long the run took (so far, when timed out)
};
nlohmann::json ToJson(const Verdict& v);
// Throws Error naming the field when `j` is not a verdict.
Verdict VerdictFromJson(const nlohmann::json& j);

class Agent {
 public:
  Agent(std::vector<CheckSpec> checks, NodeContext node);
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Starts the checks that are due, collects finished ones and returns the
  // verdicts to report: a check whose state changed (ok <-> failed, or a new
  // reason), one that passed its deadline (once per stuck run), and every
  // failing check again each `repeat_seconds`. `now`: steady-clock seconds.
  std::vector<Verdict> Tick(double now, double repeat_seconds = 10);
  // The newest verdict of every check that has completed at least once.
  std::vector<Verdict> Current() const;
  // The newest device reading, taken on a thread of its own like a check
  // (a read may block): starts a new one when none is under way, returns
  // the one that completed since the last call, if any.
  std::optional<std::vector<DeviceState>> Readings(double now);
  // The node's worker processes (for the process check): rank -> pid.
  void SetPids(std::map<int, int> pids);
  const NodeContext& node() const { return node_; }

 private:
  struct Run {  // shared with the check's thread, which may outlive the agent
    std::mutex mu;
    bool done = false;
    Outcome outcome;
  };
  struct Check {
    CheckSpec spec;
    double next_at = 0, started_at = 0, reported_at = 0;
    std::shared_ptr<Run> running;
    bool timeout_reported = false;
    std::optional<Verdict> last;
    std::shared_ptr<std::map<int, double>> process_since =
        std::make_shared<std::map<int, double>>();
  };
  Verdict Make(const Check& c, const Outcome& o) const;

  struct Reading {
    std::mutex mu;
    bool done = false;
    std::vector<DeviceState> devices;
  };
  NodeContext node_;
  std::vector<Check> checks_;
  std::shared_ptr<Reading> reading_;
};

// Runs every check once, each under its deadline (the agent's --once).
std::vector<Verdict> RunAllOnce(const std::vector<CheckSpec>& checks, const NodeContext& node);

}  // namespace fmstack::health
