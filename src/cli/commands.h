// cli: one file per verb. Each Add*Command registers its subcommand and
// returns a function main() runs when that subcommand was chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <span>
#include <string>

#include "catalog/catalog.h"
#include "spec/job_spec.h"

namespace fmstack::cli {

using Runner = std::function<int()>;

// --catalog DIR, else $FMSTACK_CATALOG, else the catalog built into the binary.
catalog::Catalog LoadCatalog(const std::string& dir);
// A job file, its [cluster] replaced by `cluster_path` when that is not empty.
spec::JobSpec LoadJob(const std::string& job_path, const std::string& cluster_path,
                      const catalog::Catalog& catalog);

Runner AddPlanCommand(CLI::App& app);
Runner AddDataCommand(CLI::App& app);
Runner AddTrainCommand(CLI::App& app);
Runner AddGenerateCommand(CLI::App& app);
Runner AddBenchCommand(CLI::App& app);
Runner AddSimCommand(CLI::App& app);
Runner AddRunCommand(CLI::App& app, std::span<char* const> argv);

}  // namespace fmstack::cli
