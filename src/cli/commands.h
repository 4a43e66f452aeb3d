// cli: one file per verb. Each Add*Command registers its subcommand and
// returns a function main() runs when that subcommand was chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "catalog/catalog.h"
#include "ckpt/tier.h"
#include "spec/job_spec.h"

namespace fmstack::cli {

using Runner = std::function<int()>;

// --catalog DIR, else $FMSTACK_CATALOG, else the catalog built into the binary.
catalog::Catalog LoadCatalog(const std::string& dir);
// A job file, its [cluster] replaced by `cluster_path` when that is not empty.
spec::JobSpec LoadJob(const std::string& job_path, const std::string& cluster_path,
                      const catalog::Catalog& catalog);

// The job's checkpoint tiers, fastest first: local (default_local when the
// job sets none), then shared and object when set.
std::vector<std::unique_ptr<ckpt::Tier>> MakeCheckpointTiers(const spec::CheckpointSpec& c,
                                                             const std::string& default_local);
// Throws the SpecError of a job without [data] dir (`fmstack train` and
// `fmstack run` both need one).
void RequireDataDir(const spec::JobSpec& job);
// `processes` trainers of `dp`-way data parallelism on this machine fit in
// its available memory (a lower bound of their need); else a SpecError
// with both numbers and what to change.
void RequireMemory(const spec::JobSpec& job, int64_t processes, int64_t dp);

// "N GB of memory is available on this machine (MemAvailable)", for an
// out-of-memory error; says so when /proc/meminfo cannot be read.
std::string MemoryAvailableText();

// The checkpoint a run would resume from (the newest committed one of
// run_dir's tiers, else `resume`'s) was written under the schedule this job
// trains (train.steps after `steps_override`, learning rates, warm-up,
// tokens per step); else a SpecError naming what changed and the flag that
// accepts it (--allow-schedule-change).
void RequireSameSchedule(const spec::JobSpec& job, int64_t steps_override,
                         const std::string& run_dir, const std::string& resume);

// The job that owns the checkpoint tiers of a run (ckpt::Tier::Claim): the
// run directory, made absolute, is its identity.
ckpt::TierOwner CheckpointOwner(const std::string& job_name, const std::string& run_dir);

Runner AddPlanCommand(CLI::App& app);
Runner AddCkptCommand(CLI::App& app);
Runner AddDataCommand(CLI::App& app);
Runner AddTrainCommand(CLI::App& app);
Runner AddGenerateCommand(CLI::App& app);
Runner AddBenchCommand(CLI::App& app);
Runner AddSimCommand(CLI::App& app);
Runner AddRunCommand(CLI::App& app, std::span<char* const> argv);
Runner AddFaultCommand(CLI::App& app);
Runner AddReportCommand(CLI::App& app);
Runner AddAgentCommand(CLI::App& app);
Runner AddNodeCommand(CLI::App& app);
Runner AddBurninCommand(CLI::App& app);
Runner AddSlurmCommand(CLI::App& app);
Runner AddCatalogCommand(CLI::App& app);
Runner AddValidateCommand(CLI::App& app);
Runner AddServeCommand(CLI::App& app);
// `fmstack bench serve`, under the bench command.
Runner AddBenchServeCommand(CLI::App& bench);

}  // namespace fmstack::cli
