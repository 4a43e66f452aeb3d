// `fmstack validate [--format table|markdown|json] [--catalog DIR]`: the step
// model against the published runs in the catalog's validation.toml.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "sim/validation.h"
#include "util/text_table.h"

namespace fmstack::cli {
namespace {

std::string Figure(const catalog::ValidationCase& c, double v) {
  if (c.metric == "step_seconds") return fmt::format("{:.1f} s", v);
  if (c.metric == "mfu_percent") return fmt::format("{:.1f}%", v);
  if (c.metric == "gpu_hours") return fmt::format("{:.0f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

std::string MetricName(const catalog::ValidationCase& c) {
  if (c.metric == "step_seconds") return "step time";
  if (c.metric == "mfu_percent") return "MFU";
  if (c.metric == "gpu_hours") return "GPU-hours";
  if (c.IsCollective()) return c.collective + " busbw GB/s";
  return "TFLOP/s per GPU";
}

nlohmann::json ToJson(const sim::Validation& v) {
  nlohmann::json j;
  for (const sim::ValidationResult& r : v.results) {
    j["cases"].push_back({{"name", r.c->name},
                          {"metric", r.c->metric},
                          {"published", r.c->published},
                          {"model", r.model},
                          {"error", r.error},
                          {"calibration", r.c->calibration},
                          {"source", r.c->source}});
    if (r.c->IsCollective()) {
      j["cases"].back()["collective"] = r.c->collective;
      j["cases"].back()["bytes"] = r.c->bytes;
    }
  }
  for (const sim::GroupOrder& g : v.groups)
    j["groups"].push_back({{"group", g.group}, {"cases", g.cases}, {"order_kept", g.kept}});
  j["median_abs_error"] = v.median_abs_error;
  j["worst_abs_error"] = v.worst_abs_error;
  j["worst_case"] = v.worst_case;
  j["independent_cases"] = v.independent;
  j["independent_median_abs_error"] = v.independent_median_abs_error;
  j["collective_cases"] = v.collectives;
  j["collective_median_abs_error"] = v.collective_median_abs_error;
  return j;
}

int Run(const std::string& format, const std::string& catalog_dir, double efficiency) {
  const catalog::Catalog catalog = LoadCatalog(catalog_dir);
  sim::StepOptions options;
  if (efficiency > 0) options.compute_efficiency = efficiency;
  const sim::Validation v = sim::Validate(catalog, options);
  const sim::Calibration cal = sim::CalibrateEfficiency(catalog);
  if (format == "json") {
    nlohmann::json j = ToJson(v);
    j["efficiency"] = options.compute_efficiency;
    j["calibration"] = {{"cases", cal.cases},
                        {"efficiency", cal.efficiency},
                        {"worst_abs_error", cal.worst_abs_error}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  TextTable t({"case", "metric", "published", "fmstack", "error"},
              {TextTable::Align::kLeft, TextTable::Align::kLeft, TextTable::Align::kRight,
               TextTable::Align::kRight, TextTable::Align::kRight});
  for (const sim::ValidationResult& r : v.results) {
    t.AddRow({r.c->name + (r.c->calibration ? " *" : ""), MetricName(*r.c),
              Figure(*r.c, r.c->published), Figure(*r.c, r.model),
              fmt::format("{:+.1f}%", 100 * r.error)});
  }
  std::cout << (format == "markdown" ? t.RenderMarkdown() : t.RenderText());
  std::cout << fmt::format("\n{} cases: median |error| {:.1f}%, worst {:.1f}% ({})\n",
                           v.results.size(), 100 * v.median_abs_error, 100 * v.worst_abs_error,
                           v.worst_case);
  std::cout << fmt::format(
      "{} training runs no constant was chosen with (* marks the others): median |error| "
      "{:.1f}%\n",
      v.independent, 100 * v.independent_median_abs_error);
  if (v.collectives > 0) {
    std::cout << fmt::format("{} collectives (nccl-tests busbw): median |error| {:.1f}%\n",
                             v.collectives, 100 * v.collective_median_abs_error);
  }
  for (const sim::GroupOrder& g : v.groups) {
    std::cout << fmt::format("{}: the {} cases in the published order: {}\n", g.group, g.cases,
                             g.kept ? "yes" : "NO");
  }
  if (cal.cases > 0) {
    std::cout << fmt::format(
        "matmul efficiency {:.2f}{}; the {} * cases are best fit by {:.3f} (worst |error| "
        "{:.1f}%)\n",
        options.compute_efficiency, efficiency > 0 ? " (--efficiency)" : "", cal.cases,
        cal.efficiency, 100 * cal.worst_abs_error);
  }
  std::cout << "sources: fmstack catalog list validation\n";
  return 0;
}

}  // namespace

Runner AddValidateCommand(CLI::App& app) {
  auto format = std::make_shared<std::string>("table");
  auto dir = std::make_shared<std::string>();
  auto efficiency = std::make_shared<double>(0);
  CLI::App* cmd =
      app.add_subcommand("validate",
                         "the step model against published training runs: each source's figure, "
                         "fmstack's, and the error");
  cmd->add_option("--format", *format, "output format")
      ->check(OneOf({"table", "markdown", "json"}));
  cmd->add_option("--catalog", *dir, "catalog directory (default: the built-in one)");
  cmd->add_option("--efficiency", *efficiency,
                  "matmul efficiency (achieved / peak) to try instead of the calibrated one")
      ->check(Between(0.01, 1.0));
  return [format, dir, efficiency] { return Run(*format, *dir, *efficiency); };
}

}  // namespace fmstack::cli
