// cli: one file per verb. Each Add*Command registers its subcommand and
// returns a function main() runs when that subcommand was chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <span>

namespace fmstack::cli {

using Runner = std::function<int()>;

Runner AddPlanCommand(CLI::App& app);
Runner AddDataCommand(CLI::App& app);
Runner AddTrainCommand(CLI::App& app);
Runner AddGenerateCommand(CLI::App& app);
Runner AddBenchCommand(CLI::App& app);
Runner AddSimCommand(CLI::App& app);
Runner AddRunCommand(CLI::App& app, std::span<char* const> argv);

}  // namespace fmstack::cli
