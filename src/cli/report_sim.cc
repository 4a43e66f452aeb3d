#include "cli/report_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "resilience/policy.h"
#include "sim/monte_carlo.h"
#include "util/error.h"
#include "util/text_table.h"
#include "util/units.h"

namespace fmstack::cli {
namespace {

// The widest 95% range of sim's ETTR that still judges a run (50 points).
constexpr double kWidestJudgedRange = 0.5;

// A line when the job's restart cost (what sim charges a recovery) is more
// than 10x away from what this run's recoveries took: then the comparison
// tests that setting, not the run. "" otherwise.
std::string RecoveryModelNote(double run_recovery_seconds, int faults, double model_seconds) {
  if (faults == 0 || run_recovery_seconds <= 0 || model_seconds <= 0) return "";
  const double measured = run_recovery_seconds / faults;
  const double ratio = model_seconds / measured;
  if (ratio <= 10 && ratio >= 0.1) return "";
  return fmt::format(
      "note: sim charges {} per restart (resilience.restart) and this run's recoveries took {} "
      "each ({:.3g}x): the shares compare that setting, not the run; set [resilience] restart to "
      "what bench/recovery.sh measures on this machine for a like-for-like comparison\n",
      units::FormatSeconds(model_seconds), units::FormatSeconds(measured), ratio);
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

std::string Pct(double share) {
  return fmt::format("{:.1f}%", 100 * share);
}

std::string Range(const sim::Interval& i, double scale, const char* unit) {
  return fmt::format("{:.1f}{} [{:.1f}, {:.1f}]", i.mean * scale, unit, i.lo * scale, i.hi * scale);
}

}  // namespace

VsSim CompareWithSim(const metrics::Ledger& ledger, const spec::JobSpec& job, int trials) {
  if (!job.cluster) throw Error(job.file + ": no [cluster]: nothing to simulate the run on");
  const nlohmann::json l = ledger.ToJson();
  std::vector<double> steps;
  for (const auto& [step, seconds] : l.at("step_seconds").items()) steps.push_back(seconds);
  if (steps.size() < 2)
    throw Error("the run's ledger holds fewer than 2 steps: nothing to compare");
  const double step = Median(steps);
  const double wall = ledger.wall(), other = ledger.Get("other");
  // The simulator plays the job from its first step to its last: the run's
  // start-up and evaluations (the ledger's "other") are outside it.
  const double played = std::max(1e-9, wall - other);
  const int64_t nodes = job.cluster->nodes;

  sim::Scenario s;
  s.job_nodes = nodes;
  s.spare_nodes = job.cluster->spares;
  s.dp = nodes;  // one replica per node: a node's loss takes one
  s.step_seconds = step;
  s.work_seconds = static_cast<double>(steps.size()) * step;
  s.horizon_seconds = 1000 * std::max(played, s.work_seconds);
  // Saves as the run made them: its cadence, its measured blocking time.
  const int64_t every = job.checkpoint.every_steps;
  s.checkpoint_interval = every > 0 ? static_cast<double>(every) * step
                                    : std::max(step, job.checkpoint.interval_seconds);
  const double saves = std::max(1.0, std::floor(s.work_seconds / s.checkpoint_interval));
  s.checkpoint_blocking = ledger.Get("checkpoint") / saves;
  s.tiers = {{.name = "local",
              .write_seconds = s.checkpoint_blocking,
              .read_seconds = s.checkpoint_blocking,
              .node_local = true}};
  s.keep = job.checkpoint.keep;
  s.milestone_interval = 0;
  s.restart_seconds = job.resilience.restart_seconds;
  s.peer_rebuild_seconds = job.resilience.peer_rebuild_seconds;
  s.policy.strategy = resilience::ParseStrategy(job.resilience.policy)
                          .value_or(resilience::Strategy::kCheckpointRestart);
  s.policy.min_dp_fraction = job.resilience.min_dp_fraction;

  // The fault load the run met: each kind of incident, at the rate it came.
  std::map<std::string, int> counts;
  for (const metrics::Incident& i : ledger.incidents()) {
    const std::optional<resilience::EventKind> kind = resilience::ParseEventName(i.kind);
    // A grow is no fault; a failed peer restore and a supervisor restart
    // follow from another fault or are the runtime's own.
    if (!kind || *kind == resilience::EventKind::kPeerRestoreFailed ||
        *kind == resilience::EventKind::kSupervisorRestart ||
        *kind == resilience::EventKind::kSignal)
      continue;
    ++counts[i.kind];
  }
  int faults = 0;
  for (const auto& [kind, n] : counts) {
    const resilience::EventKind k = *resilience::ParseEventName(kind);
    catalog::FaultCause c;
    c.name = kind;
    c.component = "run";
    // An unhealthy node is taken out of the job (drained or replaced).
    c.recovery = k == resilience::EventKind::kNodeUnhealthy ? catalog::Recovery::kReplace
                                                            : resilience::RecoveryOf(k);
    c.rate_per_node_hour = n / (static_cast<double>(nodes) * played / 3600);
    c.detect_seconds = k == resilience::EventKind::kHang ? job.resilience.heartbeat_timeout : 0;
    c.out_of_service_seconds = job.resilience.node_repair > 0 ? job.resilience.node_repair : 1e9;
    c.silent = k == resilience::EventKind::kSilentCorruption;
    s.causes.push_back(c);
    faults += n;
  }
  const sim::TrialSummary t = sim::MonteCarlo(s, trials, /*seed=*/1, /*threads=*/1);

  const double restart = ledger.Get("restart") + ledger.Get("restore") + ledger.Get("backoff");
  const sim::Badput& b = t.badput_mean;
  const double sim_wall = std::max(1e-9, t.wall.mean);
  struct Row {
    std::string name;
    double run, sim;  // shares of the played time
  };
  const std::vector<Row> rows = {
      {"productive", ledger.Get("productive") / played, t.work.mean / sim_wall},
      {"lost work", ledger.Get("lost") / played, b.lost_work / sim_wall},
      {"detection", ledger.Get("detection") / played, b.detection / sim_wall},
      {"restart + restore", restart / played, b.restart / sim_wall},
      {"checkpoint", ledger.Get("checkpoint") / played, b.checkpoint / sim_wall},
      {"waiting / degraded", 0, (b.waiting + b.degraded + b.maintenance) / sim_wall},
  };
  TextTable table({"share of time", "run", "sim (mean)"},
                  {TextTable::Align::kLeft, TextTable::Align::kRight, TextTable::Align::kRight});
  VsSim out;
  out.json["trials"] = trials;
  out.json["policy"] = job.resilience.policy;
  out.json["step_seconds"] = step;
  out.json["faults"] = faults;
  for (const Row& r : rows) {
    table.AddRow({r.name, Pct(r.run), Pct(r.sim)});
    out.json["buckets"][r.name] = {{"run", r.run}, {"sim", r.sim}};
  }
  table.AddRow({"goodput (ETTR)", Pct(rows[0].run), Range(t.ettr, 100, "%")});
  table.AddRow({"interruptions", std::to_string(faults), Range(t.interruptions, 1, "")});
  out.json["ettr"] = {
      {"run", rows[0].run}, {"sim", t.ettr.mean}, {"lo", t.ettr.lo}, {"hi", t.ettr.hi}};
  const bool inside = rows[0].run >= t.ettr.lo - 1e-12 && rows[0].run <= t.ettr.hi + 1e-12;
  // A range over half the scale judges nothing: too few faults fix the rate.
  const bool judged = t.ettr.hi - t.ettr.lo <= kWidestJudgedRange;
  out.json["within_range"] = inside;
  out.json["judged"] = judged;
  const std::string verdict =
      judged
          ? fmt::format("the run's goodput is {} sim's 95% range\n", inside ? "inside" : "outside")
          : fmt::format(
                "no verdict: sim's 95% range ({:.1f}-{:.1f}%) is too wide to judge the "
                "run; {} fault(s) in {:.1f} s of training are too few to fix their rate\n",
                100 * t.ettr.lo, 100 * t.ettr.hi, faults, played);
  out.text = fmt::format(
      "vs fmstack sim ({} trials, policy {}, {} fault(s) in {:.1f} s of training as causes; "
      "step {:.3f} s and save {:.3f} s measured here; restart {:.1f} s, peer rebuild {:.1f} s "
      "from [resilience]; sim's shares are of its mean wall time, its ETTR the mean of each "
      "trial's):\n{}{}{}",
      trials, job.resilience.policy, faults, played, step, s.checkpoint_blocking, s.restart_seconds,
      s.peer_rebuild_seconds, table.RenderText(),
      RecoveryModelNote(restart, faults, s.restart_seconds), verdict);
  return out;
}

}  // namespace fmstack::cli
