// `fmstack plan job.toml [--cluster c.toml] [--format table|json|markdown]`
#include <iostream>
#include <memory>

#include "catalog/catalog.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "plan/plan.h"
#include "plan/report.h"
#include "spec/job_spec.h"

namespace fmstack::cli {

namespace {
struct PlanArgs {
  std::string job;
  std::string cluster;
  std::string format = "table";
  std::string catalog_dir;
  plan::PlanOptions options;
};

int RunPlan(const PlanArgs& args) {
  const catalog::Catalog catalog = LoadCatalog(args.catalog_dir);
  const spec::JobSpec job = LoadJob(args.job, args.cluster, catalog);
  const plan::Plan result = plan::MakePlan(job, catalog, args.options);
  if (args.format == "json") {
    std::cout << plan::ToJson(result).dump(2) << "\n";
  } else if (args.format == "markdown") {
    std::cout << plan::RenderMarkdown(result);
  } else {
    std::cout << plan::RenderText(result);
  }
  return 0;
}
}  // namespace

Runner AddPlanCommand(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd =
      app.add_subcommand("plan", "size a job: memory, compute, time, cost, checkpoints, storage");
  cmd->add_option("job", args->job, "job spec (TOML)")->required()->check(ExistingFile());
  cmd->add_option("--cluster", args->cluster, "cluster spec (TOML); overrides the job's [cluster]")
      ->check(ExistingFile());
  cmd->add_option("--format", args->format, "output format")
      ->check(OneOf({"table", "json", "markdown"}));
  cmd->add_option("--days", args->options.deadline_days,
                  "deadline for 'accelerators to finish in D days', 0.001 to 36500")
      ->transform(Days(0.001, 36500.0));
  cmd->add_option("--observed-hours", args->options.observed_hours,
                  "accelerator-hours a real run took: report the MFU it implies")
      ->check(Positive());
  cmd->add_option("--catalog", args->catalog_dir, "catalog directory (default: the built-in one)");
  return [args] { return RunPlan(*args); };
}

}  // namespace fmstack::cli
