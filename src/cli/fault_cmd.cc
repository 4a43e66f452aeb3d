// `fmstack fault inject RUN_DIR --rank R --kind K [--at-step S]`: a fault for
// a live run to rehearse its recovery. `fmstack report RUN_DIR`: the run's
// goodput ledger and incidents.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "catalog/catalog.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/report_sim.h"
#include "metrics/goodput.h"
#include "metrics/report_html.h"
#include "metrics/samples.h"
#include "runtime/inject.h"
#include "spec/job_spec.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace fmstack::cli {
namespace {

struct FaultArgs {
  std::string run_dir, kind;
  int rank = 0;
  int64_t at_step = 0;
};

int Inject(const FaultArgs& a) {
  const std::string id = runtime::RequestInjection(a.run_dir, {"", a.kind, a.rank, a.at_step});
  std::cout << fmt::format("fault {} requested: {} on rank {} {} (run {})\n", id, a.kind, a.rank,
                           a.at_step > 0 ? fmt::format("after step {}", a.at_step) : "now",
                           a.run_dir);
  return 0;
}

struct ReportArgs {
  std::string run_dir, vs_sim, html;
  bool json = false;
  int trials = 200;
};

// The page and, beside it, each chart as STEM-NAME.svg.
void WriteHtml(const std::string& path, const std::string& run_dir, const runtime::RunInfo& info,
               const metrics::Ledger& ledger) {
  const std::vector<metrics::Chart> charts =
      metrics::RunCharts(metrics::ReadStepPoints(run_dir), ledger);
  std::vector<std::string> events;
  {
    std::ifstream in(run_dir + "/nodes/events.jsonl");
    std::string line;
    while (events.size() < 10000 && std::getline(in, line)) events.push_back(line);
  }
  const std::filesystem::path out(path);
  if (out.has_parent_path()) std::filesystem::create_directories(out.parent_path());
  auto write = [](const std::filesystem::path& p, const std::string& text) {
    AtomicFileWriter w(p.string());
    w.Write(text.data(), text.size());
    w.Commit();
  };
  write(out, metrics::RunHtml(fmt::format("fmstack run {} ({})", info.job, info.state), charts,
                              ledger, events));
  for (const metrics::Chart& c : charts) {
    std::filesystem::path svg = out;
    svg.replace_filename(out.stem().string() + "-" + c.name + ".svg");
    write(svg, c.svg);
  }
  std::cerr << fmt::format("report: {} and {} charts beside it ({}-*.svg)\n", path, charts.size(),
                           out.stem().string());
}

int Report(const ReportArgs& args) {
  const std::string& run_dir = args.run_dir;
  const bool json = args.json;
  const std::string path = run_dir + "/goodput.json";
  if (!std::filesystem::exists(path)) {
    throw Error(
        fmt::format("{}: no goodput ledger (a run writes it when it ends; is {} the "
                    "--out of a finished `fmstack run`?)",
                    path, run_dir));
  }
  if (std::filesystem::file_size(path) > 64 << 20)
    throw Error(path + ": larger than 64 MiB, not a ledger");
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Error(path + ": not a JSON object");
  // The sample ledger, where the run kept one (data-parallel under `fmstack run`).
  std::optional<metrics::SampleAudit> samples;
  if (std::filesystem::exists(run_dir + "/samples"))
    samples = metrics::AuditSamples(run_dir, 0, 0, 0);
  std::optional<VsSim> vs;
  if (!args.vs_sim.empty()) {
    metrics::Ledger ledger;
    try {
      ledger = metrics::Ledger::FromJson(j);
    } catch (const std::exception& e) {
      throw Error(fmt::format("{}: malformed ledger ({})", path, e.what()));
    }
    const catalog::Catalog catalog = catalog::Catalog::LoadEmbedded();
    vs = CompareWithSim(ledger, spec::LoadJobSpec(args.vs_sim, catalog), args.trials);
  }
  if (json) {
    nlohmann::json out = j;
    if (samples) out["samples"] = samples->ToJson();
    if (vs) out["vs_sim"] = vs->json;
    std::cout << out.dump(2) << "\n";
    return samples && !samples->ok() ? 1 : 0;
  }
  metrics::Ledger ledger;
  try {
    ledger = metrics::Ledger::FromJson(j);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: malformed ledger ({})", path, e.what()));
  }
  const runtime::RunInfo info = runtime::ReadRunInfo(run_dir);
  if (!args.html.empty()) WriteHtml(args.html, run_dir, info, ledger);
  std::cout << fmt::format("run {} ({}): {} ranks, goodput {:.1f}%\n\n", info.job, info.state,
                           info.world, 100 * ledger.Goodput())
            << ledger.RenderText();
  if (vs) std::cout << "\n" << vs->text;
  if (samples) {
    std::cout << "\nsamples: " << samples->Summary() << "\n";
    for (const std::string& p : samples->problems) std::cout << "  " << p << "\n";
    if (!samples->ok()) return 1;
  }
  return 0;
}

}  // namespace

Runner AddFaultCommand(CLI::App& app) {
  auto a = std::make_shared<FaultArgs>();
  CLI::App* fault = app.add_subcommand("fault", "rehearse faults on a live run");
  fault->require_subcommand(1);
  CLI::App* inject = fault->add_subcommand(
      "inject", "inject a fault into a live `fmstack run` (RUN_DIR is its --out directory)");
  inject->add_option("run_dir", a->run_dir, "the run's directory")->required();
  inject->add_option("--rank", a->rank, "the rank to hit")->required()->check(NonNegative());
  inject->add_option("--kind", a->kind, "what to break")
      ->required()
      ->check(OneOf(spec::InjectKinds()));
  inject->add_option("--at-step", a->at_step, "once the rank completed this step (default now)")
      ->check(NonNegative());
  return [a] { return Inject(*a); };
}

Runner AddReportCommand(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report",
      "a finished run's goodput ledger: wall time by sim's buckets, each fault, and the sample "
      "ledger's audit");
  cmd->add_option("run_dir", a->run_dir, "the run's directory (its --out)")->required();
  cmd->add_flag("--json", a->json, "the ledger as JSON");
  cmd->add_option("--html", a->html,
                  "also write a self-contained HTML page (loss, tokens/s, goodput, fault "
                  "timeline, incidents) and its charts as SVG files beside it");
  cmd->add_option("--vs-sim", a->vs_sim,
                  "the run's job file: put the ledger beside what `fmstack sim` predicts for it "
                  "under the fault load the run met")
      ->check(ExistingFile());
  cmd->add_option("--trials", a->trials, "simulator seeds for --vs-sim")->check(Between(1, 100000));
  return [a] { return Report(*a); };
}

}  // namespace fmstack::cli
