// `fmstack sim job.toml [--policy P|all] [--trials N] [--days D] [--svg F] [--search]`
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>

#include "catalog/catalog.h"
#include "cli/commands.h"
#include "cli/glossary.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "resilience/policy.h"
#include "sim/monte_carlo.h"
#include "sim/report.h"
#include "sim/scenario.h"
#include "sim/search.h"
#include "spec/job_spec.h"
#include "util/error.h"
#include "util/text_table.h"
#include "util/units.h"

namespace fmstack::cli {
namespace {

struct SimArgs {
  std::string job, cluster, catalog_dir;
  std::string policy;  // "" = the job's; "all" = compare the three
  int trials = 20;
  uint64_t seed = 1;
  double days = 0;
  int64_t spares = -1;
  int threads = 0;
  bool tcp = false;
  double efficiency = 0;
  std::string format = "table";
  std::string json_path, svg_path;
  bool search = false;
  bool explain = false;
  std::vector<std::string> busbw;  // [OP=]FILE
};

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out.flush()) throw Error(fmt::format("{}: cannot write", path));
}

int RunSearch(const spec::JobSpec& job, const sim::ScenarioOptions& options, bool markdown) {
  const sim::Topology topo = sim::BuildTopology(*job.cluster, options.network);
  const auto start = std::chrono::steady_clock::now();
  const sim::SearchResult r =
      sim::SearchLayouts(job, topo, job.cluster->accelerator, options.step, 10);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  TextTable t({"#", "tp", "pp", "cp", "dp", "micro-batch", "step", "bubble", "comm exposed",
               "TFLOP/s/acc", "MFU", "memory"},
              std::vector<TextTable::Align>(12, TextTable::Align::kRight));
  int rank = 0;
  for (const sim::Candidate& c : r.best) {
    const sim::StepTime& s = c.step;
    t.AddRow({std::to_string(++rank), std::to_string(c.layout.tp), std::to_string(c.layout.pp),
              std::to_string(c.layout.cp), std::to_string(c.layout.dp),
              std::to_string(c.micro_batch), units::FormatSeconds(s.total),
              units::FormatSeconds(s.bubble),
              units::FormatSeconds(s.tp + s.cp + s.pp + s.ep_exposed + s.dp_exposed),
              fmt::format("{:.0f}", s.tflops_per_accelerator), fmt::format("{:.1f}%", 100 * s.mfu),
              units::FormatBytes(s.memory_per_accelerator)});
  }
  std::cout << fmt::format(
      "searched {} layouts of {} on {} x {} in {:.1f} ms; {} do not fit in {}\n\n", r.evaluated,
      job.model.name, job.cluster->accelerators(), job.cluster->accelerator.name, seconds * 1e3,
      r.too_big, units::FormatBytes(job.cluster->accelerator.hbm_bytes));
  std::cout << (markdown ? t.RenderMarkdown() : t.RenderText());
  if (r.best.empty()) {
    std::cout << "no layout fits: more accelerators, ZeRO, or full recompute\n";
    return 1;
  }
  const sim::Candidate& b = r.best.front();
  std::cout << fmt::format(
      "\nbest: [parallel] tp = {}, pp = {}, cp = {} (dp = {}); [train] micro_batch = {}\n",
      b.layout.tp, b.layout.pp, b.layout.cp, b.layout.dp, b.micro_batch);
  return 0;
}

// The glossary's terms that sim's header and tables use, for --explain.
constexpr std::array<std::string_view, 25> kSimTerms = {"accelerator",
                                                        "MFU",
                                                        "DP, TP, PP, CP, EP",
                                                        "ZeRO stage",
                                                        "micro-batch",
                                                        "bubble",
                                                        "exposed communication",
                                                        "MTTI",
                                                        "fault set",
                                                        "planned maintenance",
                                                        "interruption",
                                                        "blocking save",
                                                        "tier",
                                                        "Young/Daly interval",
                                                        "checkpoint-restart",
                                                        "checkpointless",
                                                        "elastic",
                                                        "spare",
                                                        "peer rebuild",
                                                        "peer state transfer",
                                                        "ETTR",
                                                        "lost work",
                                                        "detection",
                                                        "waiting for a node",
                                                        "95% range"};

// Without spares, checkpointless and checkpoint-restart both wait for the
// node's repair; say so, or the two equal columns look like a bug.
std::string NoSpareNote(const sim::Scenario& s,
                        const std::vector<resilience::Strategy>& strategies) {
  const bool peers = std::find(strategies.begin(), strategies.end(),
                               resilience::Strategy::kCheckpointless) != strategies.end();
  if (s.spare_nodes > 0 || !peers) return "";
  return "\nno spare nodes: under checkpointless a lost node's ranks wait for its repair "
         "(resilience.node_repair) as under checkpoint-restart; it saves only the restore and the "
         "lost work. Give spares (cluster.spares or --spares N) to see a spare swap.\n";
}

// A step time for a layout that cannot run would be a made-up number.
void RefuseIfItDoesNotFit(const spec::JobSpec& job, const sim::StepTime& step) {
  if (step.fits) return;
  throw SpecError(
      job.PosOf("parallel"), "parallel",
      fmt::format("the layout (dp {} x tp {} x pp {} x cp {}, ZeRO-{}, micro-batch {}) does not "
                  "fit: {} per accelerator > {} HBM of {}; raise tp or pp, zero_stage, or "
                  "train.recompute, or let `fmstack sim --search` rank the layouts that fit",
                  job.layout.dp, job.layout.tp, job.layout.pp, job.layout.cp, job.layout.zero_stage,
                  job.train.micro_batch, units::FormatBytes(step.memory_per_accelerator),
                  units::FormatBytes(job.cluster->accelerator.hbm_bytes),
                  job.cluster->accelerator.name));
}

int RunSim(const SimArgs& args) {
  const catalog::Catalog catalog = LoadCatalog(args.catalog_dir);
  const spec::JobSpec job = LoadJob(args.job, args.cluster, catalog);
  sim::ScenarioOptions options;
  options.horizon_seconds = args.days * 86400;
  if (args.spares >= 0) options.spares = args.spares;
  options.network.tcp_only = args.tcp;
  if (args.efficiency > 0) options.step.compute_efficiency = args.efficiency;
  options.timeline = !args.svg_path.empty();
  if (args.busbw.size() > 1) {
    throw Error("--busbw: give one file (a bench comm table holds every op)");
  }
  std::optional<sim::MeasuredBusbw> measured;
  for (const std::string& spec : args.busbw) {
    const size_t eq = spec.find('=');
    std::optional<sim::Collective> op;
    if (eq != std::string::npos) {
      op = sim::ParseCollective(spec.substr(0, eq));
      if (!op)
        throw Error(fmt::format("--busbw {}: unknown collective '{}'", spec, spec.substr(0, eq)));
    }
    measured = sim::MeasuredBusbw::Load(eq == std::string::npos ? spec : spec.substr(eq + 1), op);
  }
  if (measured) {
    options.step.measured = &*measured;
    if (args.format != "json") std::cout << "measured busbw: " << measured->Describe() << "\n";
  }
  const bool markdown = args.format == "markdown";
  if (args.search) {
    if (!job.cluster) {
      throw SpecError(job.PosOf("cluster"), "cluster", "--search needs a [cluster] to tile");
    }
    return RunSearch(job, options, markdown);
  }

  std::vector<resilience::Strategy> strategies;
  if (args.policy == "all") {
    strategies = {resilience::Strategy::kCheckpointRestart, resilience::Strategy::kCheckpointless,
                  resilience::Strategy::kElastic};
  } else if (!args.policy.empty()) {
    strategies = {*resilience::ParseStrategy(args.policy)};
  } else {
    strategies = {resilience::ParseStrategy(job.resilience.policy).value()};
  }

  const sim::BuiltScenario base = sim::MakeScenario(job, catalog, options);
  RefuseIfItDoesNotFit(job, base.info.step);
  if (args.format != "json") std::cout << sim::RenderScenario(job, base) << "\n";
  const ProgressLine progress;
  std::vector<sim::PolicyOutcome> outcomes;
  const auto start = std::chrono::steady_clock::now();
  for (size_t p = 0; p < strategies.size(); ++p) {
    sim::Scenario s = base.scenario;
    s.policy.strategy = strategies[p];
    sim::PolicyOutcome o;
    o.policy = std::string(resilience::StrategyName(strategies[p]));
    o.summary = sim::MonteCarlo(s, args.trials, args.seed, args.threads, [&](int done) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double total =
          static_cast<double>(args.trials) * static_cast<double>(strategies.size());
      const double finished = static_cast<double>(p) * args.trials + done;
      const double rate = elapsed > 0 ? finished / elapsed : 0;
      progress.Show(
          static_cast<int64_t>(finished), static_cast<int64_t>(total),
          fmt::format("sim {:>14}: trial {}/{}  {:.1f} trials/s  ETA {:.1f} s", o.policy, done,
                      args.trials, rate, rate > 0 ? (total - finished) / rate : 0.0));
    });
    if (options.timeline) {
      s.record_timeline = true;
      o.first = sim::Simulate(s, sim::TrialSeed(args.seed, 0));
    }
    outcomes.push_back(std::move(o));
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  progress.Note(fmt::format("simulated {} policies x {} trials in {:.2f} s", strategies.size(),
                            args.trials, elapsed));

  const nlohmann::json json = sim::OutcomesJson(job, base, outcomes, args.seed);
  if (args.format == "json") {
    std::cout << json.dump(2) << "\n";
  } else {
    std::cout << fmt::format("{} trials per policy, seed {}, the same faults for every policy\n\n",
                             args.trials, args.seed);
    std::cout << sim::RenderOutcomes(base.scenario, outcomes, markdown) << "\n";
    std::cout << "interruptions by cause (" << outcomes.front().policy << ")\n";
    std::cout << sim::RenderCauses(base.scenario, outcomes, markdown);
    std::cout << NoSpareNote(base.scenario, strategies);
    if (args.explain) std::cout << "\nterms (docs/glossary.md)\n" << ExplainTerms(kSimTerms);
  }
  if (!args.json_path.empty()) WriteFile(args.json_path, json.dump(2) + "\n");
  if (!args.svg_path.empty()) {
    WriteFile(args.svg_path,
              sim::TimelineSvg(base.scenario, outcomes,
                               fmt::format("{} on {} accelerators: trained work over wall time "
                                           "(seed {}, trial 0)",
                                           job.name, job.cluster->accelerators(), args.seed)));
    if (args.format != "json") std::cout << "\ntimeline: " << args.svg_path << "\n";
  }
  return 0;
}

}  // namespace

Runner AddSimCommand(CLI::App& app) {
  auto args = std::make_shared<SimArgs>();
  CLI::App* cmd = app.add_subcommand(
      "sim", "play a job out on a simulated cluster with faults: goodput, time to train, cost");
  cmd->add_option("job", args->job, "job spec (TOML)")->required()->check(ExistingFile());
  cmd->add_option("--cluster", args->cluster, "cluster spec (TOML); overrides the job's [cluster]")
      ->check(ExistingFile());
  cmd->add_option("--policy", args->policy,
                  "recovery policy (default: the job's [resilience] policy); all = compare")
      ->check(OneOf({"checkpoint", "checkpointless", "elastic", "all"}));
  cmd->add_option("--trials", args->trials, "Monte Carlo trials per policy")
      ->check(Between(1, 1000000));
  cmd->add_option("--seed", args->seed, "seed of the fault traces");
  cmd->add_option("--days", args->days,
                  "simulate a fixed window of D days, at most 36500 (default: until the job's "
                  "tokens are trained)")
      ->transform(Days(1e-6, 36500.0));
  cmd->add_option("--spares", args->spares, "spare nodes (default: cluster.spares)")
      ->check(Between(0, 1 << 20));
  cmd->add_option("--threads", args->threads, "worker threads (default: all cores)");
  cmd->add_flag("--tcp", args->tcp, "no EFA/InfiniBand: TCP over the instance network");
  cmd->add_option("--efficiency", args->efficiency,
                  fmt::format("matmul efficiency (achieved / peak), default {} (calibrated: "
                              "fmstack validate)",
                              sim::StepOptions{}.compute_efficiency))
      ->check(Between(0.01, 1.0));
  cmd->add_option("--format", args->format, "output format")
      ->check(OneOf({"table", "markdown", "json"}));
  cmd->add_option("--json", args->json_path, "also write the results as JSON to this file");
  cmd->add_option("--svg", args->svg_path, "write a timeline plot (SVG) to this file");
  cmd->add_flag("--search", args->search,
                "rank the (TP, PP, CP, DP, micro-batch) layouts for this job and cluster");
  cmd->add_flag("--explain", args->explain,
                "after the results, define each term they use (MTTI, ETTR, bubble, ...)");
  cmd->add_option("--busbw", args->busbw,
                  "measured busbw for groups across nodes: `fmstack bench comm --markdown` "
                  "output, or OP=FILE with nccl-tests output (e.g. allreduce=ar.txt)");
  cmd->add_option("--catalog", args->catalog_dir, "catalog directory (default: the built-in one)");
  return [args] { return RunSim(*args); };
}

}  // namespace fmstack::cli
