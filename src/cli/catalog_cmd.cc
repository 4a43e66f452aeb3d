// `fmstack catalog list [KIND]`: the names every lookup accepts (instances,
// accelerators, storage tiers, fault sets, model presets), so that an
// "unknown ..." error always has a place to look.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "cli/glossary.h"
#include "cli/options.h"
#include "util/error.h"
#include "util/text_table.h"
#include "util/units.h"
#include "workload/presets.h"

namespace fmstack::cli {
namespace {

std::string Joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "-" : s;
}

void Instances(const catalog::Catalog& c) {
  TextTable t({"instance", "aliases", "accelerators", "network", "USD/h"});
  for (const catalog::Instance& i : c.instances()) {
    t.AddRow({i.name, Joined(i.aliases), fmt::format("{} x {}", i.accelerators, i.accelerator),
              units::FormatBandwidth(i.network_bandwidth),
              i.price_per_hour > 0 ? fmt::format("{:.2f}", i.price_per_hour) : "-"});
  }
  std::cout << "instances (cluster.instance)\n" << t.RenderText() << "\n";
}

void Accelerators(const catalog::Catalog& c) {
  TextTable t({"accelerator", "aliases", "vendor", "bf16 peak", "HBM"});
  for (const catalog::Accelerator& a : c.accelerators()) {
    t.AddRow({a.name, Joined(a.aliases), a.vendor, units::FormatFlopRate(a.bf16_flops),
              units::FormatBytes(a.hbm_bytes)});
  }
  std::cout << "accelerators\n" << t.RenderText() << "\n";
}

void Storage(const catalog::Catalog& c) {
  TextTable t({"tier", "kind", "USD/GB-month"});
  for (const catalog::StorageTier& s : c.storage()) {
    const char* kind = s.kind == catalog::StorageKind::kLocal    ? "local"
                       : s.kind == catalog::StorageKind::kShared ? "shared"
                                                                 : "object";
    t.AddRow({s.name, kind, fmt::format("{:.4f}", s.price_per_gb_month)});
  }
  std::cout << "storage tiers ([cluster.local|shared|object] tier)\n" << t.RenderText() << "\n";
}

void Faults(const catalog::Catalog& c) {
  TextTable t({"fault set", "causes", "observed", "unplanned per 1000 node-days", "source"},
              {TextTable::Align::kLeft, TextTable::Align::kRight, TextTable::Align::kRight,
               TextTable::Align::kRight, TextTable::Align::kLeft});
  for (const catalog::FaultSet& f : c.fault_sets()) {
    t.AddRow({f.name, std::to_string(f.causes.size()),
              fmt::format("{:g} nodes x {:g} d", f.observed_nodes, f.observed_hours / 24),
              fmt::format("{:.1f}", f.UnplannedPerNodeHour() * 24 * 1000), f.source.substr(0, 60)});
  }
  std::cout << "fault sets (faults.set)\n" << t.RenderText() << "\n";
}

void Presets() {
  TextTable t({"preset", "layers", "hidden", "heads", "vocab", "seq"});
  for (const std::string& name : workload::PresetNames()) {
    const std::optional<workload::TransformerShape> s = workload::FindPreset(name);
    if (!s) continue;
    t.AddRow({name, std::to_string(s->layers), std::to_string(s->hidden), std::to_string(s->heads),
              std::to_string(s->vocab), std::to_string(s->seq_len)});
  }
  std::cout << "model presets (model)\n" << t.RenderText() << "\n";
}

// Sources run to hundreds of characters and are shared by several cases, so
// the table names each by number and the sources follow it in full.
void Validation(const catalog::Catalog& c) {
  TextTable t({"case", "metric", "published", "role", "source"},
              {TextTable::Align::kLeft, TextTable::Align::kLeft, TextTable::Align::kRight,
               TextTable::Align::kLeft, TextTable::Align::kRight});
  std::vector<std::string> sources;
  for (const catalog::ValidationCase& v : c.validation_cases()) {
    auto it = std::find(sources.begin(), sources.end(), v.source);
    if (it == sources.end()) it = sources.insert(sources.end(), v.source);
    t.AddRow({v.name, v.metric, fmt::format("{:g}", v.published),
              v.calibration ? "calibration" : "check",
              fmt::format("[{}]", it - sources.begin() + 1)});
  }
  std::cout << "validation cases (fmstack validate)\n" << t.RenderText() << "\n";
  for (size_t i = 0; i < sources.size(); ++i)
    std::cout << fmt::format("[{}] {}\n", i + 1, sources[i]);
  std::cout << "\n";
}

void Terms() {
  std::vector<std::string_view> names;
  for (const Term& term : Glossary()) names.push_back(term.name);
  std::cout << "terms (docs/glossary.md)\n" << ExplainTerms(names) << "\n";
}

}  // namespace

Runner AddCatalogCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("catalog", "the hardware catalog and model presets by name");
  cmd->require_subcommand(1);
  CLI::App* list = cmd->add_subcommand("list", "every name a job or cluster file may use");
  auto kind = std::make_shared<std::string>("all");
  auto dir = std::make_shared<std::string>();
  list->add_option("kind", *kind,
                   "instances, accelerators, storage, faults, presets, validation, terms or all")
      ->check(OneOf({"all", "instances", "accelerators", "storage", "faults", "presets",
                     "validation", "terms"}));
  list->add_option("--catalog", *dir, "catalog directory (default: the built-in one)");
  return [kind, dir] {
    const catalog::Catalog c = LoadCatalog(*dir);
    const bool all = *kind == "all";
    if (all || *kind == "instances") Instances(c);
    if (all || *kind == "accelerators") Accelerators(c);
    if (all || *kind == "storage") Storage(c);
    if (all || *kind == "faults") Faults(c);
    if (all || *kind == "presets") Presets();
    if (*kind == "validation") Validation(c);
    if (*kind == "terms") Terms();
    return 0;
  };
}

}  // namespace fmstack::cli
