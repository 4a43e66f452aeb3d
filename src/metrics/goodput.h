// metrics: the goodput ledger of one run. Every second of wall time lands in
// exactly one bucket; the buckets are `fmstack sim`'s (productive = sim's
// training work, lost = rolled-back work, detection, restart + restore =
// sim's restart, checkpoint, waiting), so a real run can be put beside the
// simulator's prediction for the same job file. Incidents record each fault:
// what, where, when detected, what was decided and how long recovery took.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fmstack::metrics {

struct Incident {
  std::string kind;              // crash, hang, nan, ... (resilience::EventName)
  int rank = -1;                 // blamed rank, -1 = not one rank
  int64_t step = 0;              // newest step reached when it happened
  double at = 0;                 // seconds since the run started, when detected
  double detect_seconds = -1;    // fault -> detection, when the fault time is known
  double recovery_seconds = -1;  // detection -> first completed step after it
  int64_t lost_steps = 0;        // steps trained again
  std::string decision;          // the verb and reason from resilience::Decide
  std::string what;              // the detail that names the rank and cause
};

// One `fmstack run` of the run directory: a rerun after a failure, a stop or
// a finished run with more steps continues the same ledger.
struct Attempt {
  int64_t started_unix = 0;  // wall-clock start, seconds since the epoch
  double at = 0;             // the ledger's wall seconds when it started
  int64_t from_step = -1;    // the step it restored (0: from scratch; -1: none reported)
  std::string end;           // running, finished, stopped, failed, restarting
};

class Ledger {
 public:
  // Seconds booked per bucket, by name.
  static const std::vector<std::string>& Buckets();

  void Book(const std::string& bucket, double seconds);
  double Get(const std::string& bucket) const;
  // Step `step` took `seconds` of productive time. A later RollBack moves it to lost.
  void Step(int64_t step, double seconds);
  // The run restarted from `restored_step`: every step after it is lost. Returns their count.
  int64_t RollBack(int64_t restored_step);
  void SetWall(double seconds) { wall_ = seconds; }
  double wall() const { return wall_; }
  std::vector<Incident>& incidents() { return incidents_; }
  const std::vector<Incident>& incidents() const { return incidents_; }
  std::vector<Attempt>& attempts() { return attempts_; }
  const std::vector<Attempt>& attempts() const { return attempts_; }

  // productive / wall.
  double Goodput() const;
  nlohmann::json ToJson() const;
  static Ledger FromJson(const nlohmann::json& j);
  // The buckets (seconds and share; "other" = wall less the rest), the
  // attempts when there were several, and the incidents.
  std::string RenderText() const;

 private:
  std::map<std::string, double> seconds_;
  std::map<int64_t, double> steps_;  // productive time of every kept step
  double wall_ = 0;
  std::vector<Incident> incidents_;
  std::vector<Attempt> attempts_;
};

}  // namespace fmstack::metrics
