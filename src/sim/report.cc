#include "sim/report.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/faults.h"
#include "util/text_table.h"
#include "util/units.h"

namespace fmstack::sim {
namespace {

using units::FormatBytes;
using units::FormatSeconds;
using units::FormatUsd;

// "mean [lo, hi]", or the value alone when every trial gave the same one.
std::string WithRange(const std::string& mean, const std::string& lo, const std::string& hi) {
  return lo == hi ? mean : fmt::format("{} [{}, {}]", mean, lo, hi);
}
std::string Pct(const Interval& i) {
  return WithRange(fmt::format("{:.1f}%", 100 * i.mean), fmt::format("{:.1f}", 100 * i.lo),
                   fmt::format("{:.1f}", 100 * i.hi));
}
std::string Count(const Interval& i) {
  return WithRange(fmt::format("{:.1f}", i.mean), fmt::format("{:.0f}", i.lo),
                   fmt::format("{:.0f}", i.hi));
}
std::string Days(const Interval& i) {
  return WithRange(fmt::format("{:.2f} d", i.mean / 86400), fmt::format("{:.2f}", i.lo / 86400),
                   fmt::format("{:.2f}", i.hi / 86400));
}
std::string Usd(const Interval& i) {
  return WithRange(FormatUsd(i.mean), FormatUsd(i.lo), FormatUsd(i.hi));
}
std::string Hours(double seconds, double wall) {
  return fmt::format("{:.1f} h ({:.2f}%)", seconds / 3600, wall > 0 ? 100 * seconds / wall : 0);
}

// `text` on lines of at most 100 columns under the header's 9-column labels.
std::string Indented(std::string_view text) {
  constexpr size_t kIndent = 9, kWidth = 100;
  std::string out, line;
  while (!text.empty()) {
    const size_t space = text.find(' ');
    const std::string_view word = text.substr(0, space);
    if (!line.empty() && kIndent + line.size() + 1 + word.size() > kWidth) {
      out += std::string(kIndent, ' ') + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + std::string(word);
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
  }
  if (!line.empty()) out += std::string(kIndent, ' ') + line + "\n";
  return out;
}

}  // namespace

// One fact per line, each under ~100 columns, so it reads in a terminal;
// the terms are defined by `fmstack sim --explain` and docs/glossary.md.
std::string RenderScenario(const spec::JobSpec& job, const BuiltScenario& b) {
  const Scenario& s = b.scenario;
  const ScenarioInfo& i = b.info;
  const spec::ClusterSpec& c = *job.cluster;
  std::string out;
  out += fmt::format("job      {} ({})\n", job.name, job.model.name);
  out += fmt::format("cluster  {} x {} = {} x {}, {} spare nodes\n", c.nodes, c.instance.name,
                     c.accelerators(), c.accelerator.name, s.spare_nodes);
  const workload::Layout& l = job.layout;
  out += fmt::format(
      "layout   dp {} x tp {} x pp {} x cp {} (ep {}), ZeRO-{}, micro-batch {}, {} micro-batches\n",
      l.dp, l.tp, l.pp, l.cp, l.ep, l.zero_stage, job.train.micro_batch, i.step.micro_batches);
  const StepTime& t = i.step;
  out += fmt::format("step     {}: compute {}, pipeline bubble {}, exposed communication {}\n",
                     FormatSeconds(t.total), FormatSeconds(t.compute), FormatSeconds(t.bubble),
                     FormatSeconds(t.tp + t.cp + t.pp + t.ep_exposed + t.dp_exposed));
  const std::string ep = t.ep_exposed < t.ep ? fmt::format("{} of {}", FormatSeconds(t.ep_exposed),
                                                           FormatSeconds(t.ep))
                                             : FormatSeconds(t.ep);
  out += fmt::format("comm     tp {}, cp {}, pp {}, ep {}; dp {} of {} not hidden by compute\n",
                     FormatSeconds(t.tp), FormatSeconds(t.cp), FormatSeconds(t.pp), ep,
                     FormatSeconds(t.dp_exposed), FormatSeconds(t.dp));
  out += fmt::format(
      "speed    {:.0f} TFLOP/s per accelerator, MFU {:.1f}% (step model); memory {} of {}\n",
      t.tflops_per_accelerator, 100 * t.mfu, FormatBytes(t.memory_per_accelerator),
      FormatBytes(c.accelerator.hbm_bytes));
  if (i.steps > 0) {
    out += fmt::format("work     {} steps = {:.2f} days without faults\n", i.steps,
                       s.work_seconds / 86400);
  } else {
    out += fmt::format("work     a fixed window of {:.1f} days\n", s.horizon_seconds / 86400);
  }
  out += fmt::format(
      "faults   job MTTI {:.2f} h (unexpected){}\n", i.mtti / 3600,
      s.planned_per_node_hour > 0
          ? fmt::format(", planned maintenance every {:.1f} h",
                        1.0 / (s.planned_per_node_hour * static_cast<double>(s.job_nodes)))
          : "");
  out += Indented("from " + i.fault_source);
  out += fmt::format("ckpt     {} per save, blocking {}, keep {}\n",
                     FormatBytes(i.checkpoint_bytes), FormatSeconds(s.checkpoint_blocking), s.keep);
  out += fmt::format("interval {} ({})\n", FormatSeconds(s.checkpoint_interval), i.interval_rule);
  if (s.tiers.empty()) out += "tiers    none\n";
  for (size_t k = 0; k < s.tiers.size(); ++k) {
    out += fmt::format("{}{} write {} / read {}\n", k == 0 ? "tiers    " : "         ",
                       s.tiers[k].name, FormatSeconds(s.tiers[k].write_seconds),
                       FormatSeconds(s.tiers[k].read_seconds));
  }
  if (!c.shared.configured && !c.object.configured) {
    out +=
        "warning  no durable tier (cluster.shared or cluster.object): a silent corruption\n"
        "         found after the local copies rotate out restarts from step 0\n";
  }
  const std::string spares = resilience::SparesWarning(i.nodes_away, s.spare_nodes);
  if (!spares.empty()) out += "warning" + Indented(spares).substr(7);
  out += fmt::format("recovery restart {}, peer rebuild {}, peer state transfer {} ({} per node)\n",
                     FormatSeconds(s.restart_seconds), FormatSeconds(s.peer_rebuild_seconds),
                     FormatSeconds(s.peer_restore_seconds), FormatBytes(i.state_per_node));
  out +=
      "terms    MTTI, ETTR, blocking, bubble, exposed, Young/Daly: fmstack sim --explain, "
      "docs/glossary.md\n";
  return out;
}

std::string RenderOutcomes(const Scenario& s, const std::vector<PolicyOutcome>& outcomes,
                           bool markdown) {
  std::vector<std::string> header{"mean [95% range]"};
  std::vector<TextTable::Align> align{TextTable::Align::kLeft};
  for (const PolicyOutcome& o : outcomes) {
    header.push_back(o.policy);
    align.push_back(TextTable::Align::kRight);
  }
  TextTable table(header, align);
  auto row = [&](const std::string& name, auto cell) {
    std::vector<std::string> cells{name};
    for (const PolicyOutcome& o : outcomes) cells.push_back(cell(o.summary));
    table.AddRow(cells);
  };
  row("ETTR (goodput)", [](const TrialSummary& t) { return Pct(t.ettr); });
  if (s.work_seconds > 0) {
    row("time to train", [](const TrialSummary& t) { return Days(t.wall); });
    row("finished in horizon",
        [](const TrialSummary& t) { return fmt::format("{:.0f}%", 100 * t.finished_share); });
  } else {
    row("trained (fault-free days)", [](const TrialSummary& t) { return Days(t.work); });
  }
  row("interruptions", [](const TrialSummary& t) { return Count(t.interruptions); });
  row("planned maintenance", [](const TrialSummary& t) { return Count(t.planned); });
  auto bad = [&](const std::string& name, double Badput::*field) {
    row(name, [field](const TrialSummary& t) { return Hours(t.badput_mean.*field, t.wall.mean); });
  };
  bad("  lost work (recomputed)", &Badput::lost_work);
  bad("  detection", &Badput::detection);
  bad("  restart / restore", &Badput::restart);
  bad("  checkpoint stall", &Badput::checkpoint);
  bad("  waiting for a node", &Badput::waiting);
  bad("  degraded (fewer replicas)", &Badput::degraded);
  bad("  maintenance", &Badput::maintenance);
  row("spare swaps / waits / shrinks", [](const TrialSummary& t) {
    return fmt::format("{:.0f} / {:.0f} / {:.0f}", t.spare_swaps, t.waits, t.shrinks);
  });
  if (s.price_per_node_hour > 0) {
    row("cost (nodes + spares)", [](const TrialSummary& t) { return Usd(t.cost); });
  }
  return markdown ? table.RenderMarkdown() : table.RenderText();
}

std::string RenderCauses(const Scenario& s, const std::vector<PolicyOutcome>& outcomes,
                         bool markdown) {
  TextTable table({"cause", "recovery", "detect", "per run", "share"},
                  {TextTable::Align::kLeft, TextTable::Align::kLeft, TextTable::Align::kRight,
                   TextTable::Align::kRight, TextTable::Align::kRight});
  if (outcomes.empty()) return "";
  const TrialSummary& t = outcomes.front().summary;
  double total = 0;
  for (double c : t.by_cause) total += c;
  std::vector<size_t> order(s.causes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return t.by_cause[a] > t.by_cause[b]; });
  for (size_t i : order) {
    const catalog::FaultCause& c = s.causes[i];
    table.AddRow({c.name + (c.silent ? " (silent)" : ""),
                  std::string(catalog::RecoveryName(c.recovery)), FormatSeconds(c.detect_seconds),
                  fmt::format("{:.1f}", t.by_cause[i]),
                  fmt::format("{:.1f}%", total > 0 ? 100 * t.by_cause[i] / total : 0)});
  }
  table.AddRow({"total", "", "", fmt::format("{:.1f}", total), "100%"});
  return markdown ? table.RenderMarkdown() : table.RenderText();
}

nlohmann::json OutcomesJson(const spec::JobSpec& job, const BuiltScenario& b,
                            const std::vector<PolicyOutcome>& outcomes, uint64_t seed) {
  using nlohmann::json;
  auto interval = [](const Interval& i) {
    return json{{"mean", i.mean}, {"p2_5", i.lo}, {"p97_5", i.hi}, {"mean_ci95", i.half_width}};
  };
  const Scenario& s = b.scenario;
  json j;
  j["job"] = job.name;
  j["seed"] = seed;
  j["scenario"] = {{"job_nodes", s.job_nodes},
                   {"spare_nodes", s.spare_nodes},
                   {"dp", s.dp},
                   {"step_seconds", s.step_seconds},
                   {"tflops_per_accelerator", b.info.step.tflops_per_accelerator},
                   {"mfu", b.info.step.mfu},
                   {"work_seconds", s.work_seconds},
                   {"horizon_seconds", s.horizon_seconds},
                   {"checkpoint_bytes", b.info.checkpoint_bytes},
                   {"checkpoint_blocking_seconds", s.checkpoint_blocking},
                   {"checkpoint_interval_seconds", s.checkpoint_interval},
                   {"interval_rule", b.info.interval_rule},
                   {"job_mtti_seconds", b.info.mtti},
                   {"nodes_away", b.info.nodes_away.mean},
                   {"spares_99", b.info.nodes_away.spares_99},
                   {"fault_source", b.info.fault_source}};
  for (const PolicyOutcome& o : outcomes) {
    const TrialSummary& t = o.summary;
    const Badput& m = t.badput_mean;
    json causes = json::object();
    for (size_t i = 0; i < s.causes.size(); ++i) causes[s.causes[i].name] = t.by_cause[i];
    j["policies"][o.policy] = {{"trials", t.trials},
                               {"ettr", interval(t.ettr)},
                               {"wall_seconds", interval(t.wall)},
                               {"work_seconds", interval(t.work)},
                               {"interruptions", interval(t.interruptions)},
                               {"planned", interval(t.planned)},
                               {"cost_usd", interval(t.cost)},
                               {"finished_share", t.finished_share},
                               {"badput_seconds",
                                {{"lost_work", m.lost_work},
                                 {"detection", m.detection},
                                 {"restart", m.restart},
                                 {"checkpoint", m.checkpoint},
                                 {"waiting", m.waiting},
                                 {"degraded", m.degraded},
                                 {"maintenance", m.maintenance}}},
                               {"interruptions_by_cause", causes}};
  }
  return j;
}

}  // namespace fmstack::sim
