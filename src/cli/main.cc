// fmstack: plan, simulate and run foundation-model training jobs.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <iostream>
#include <new>
#include <optional>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "gpt/blas_core.h"
#include "util/error.h"
#include "util/huge_pages.h"

int main(int argc, char** argv) {
  // First, before OpenBLAS is used: a CPU newer than the OpenBLAS build gets its fast kernels.
  fmstack::gpt::ReexecWithBestBlasCore(std::span<char* const>(argv, static_cast<size_t>(argc)));
  CLI::App app{"fmstack: plan, simulate and run foundation-model training on a cluster"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "fmstack 0.1.0");
  const fmstack::cli::Runner plan = fmstack::cli::AddPlanCommand(app);
  const fmstack::cli::Runner sim = fmstack::cli::AddSimCommand(app);
  const fmstack::cli::Runner data = fmstack::cli::AddDataCommand(app);
  const fmstack::cli::Runner train = fmstack::cli::AddTrainCommand(app);
  const fmstack::cli::Runner generate = fmstack::cli::AddGenerateCommand(app);
  const fmstack::cli::Runner bench = fmstack::cli::AddBenchCommand(app);
  const fmstack::cli::Runner ckpt = fmstack::cli::AddCkptCommand(app);
  const fmstack::cli::Runner run =
      fmstack::cli::AddRunCommand(app, std::span<char* const>(argv, static_cast<size_t>(argc)));
  const fmstack::cli::Runner fault = fmstack::cli::AddFaultCommand(app);
  const fmstack::cli::Runner report = fmstack::cli::AddReportCommand(app);
  const fmstack::cli::Runner agent = fmstack::cli::AddAgentCommand(app);
  const fmstack::cli::Runner node = fmstack::cli::AddNodeCommand(app);
  const fmstack::cli::Runner burnin = fmstack::cli::AddBurninCommand(app);
  const fmstack::cli::Runner slurm = fmstack::cli::AddSlurmCommand(app);
  const fmstack::cli::Runner catalog = fmstack::cli::AddCatalogCommand(app);
  const fmstack::cli::Runner validate = fmstack::cli::AddValidateCommand(app);
  const fmstack::cli::Runner serve = fmstack::cli::AddServeCommand(app);
  // A mistyped verb: CLI11 would say only "A subcommand is required".
  if (argc >= 2 && argv[1][0] != '-' && std::string_view(argv[1]) != "help") {
    std::vector<std::string> verbs;
    for (const CLI::App* sub : app.get_subcommands({})) verbs.push_back(sub->get_name());
    if (std::find(verbs.begin(), verbs.end(), argv[1]) == verbs.end()) {
      std::cerr << fmt::format("fmstack: no command \"{}\" {}; `fmstack help` lists them\n",
                               argv[1], fmstack::DidYouMeanOrList(argv[1], verbs, "commands"));
      return fmstack::cli::kExitBadInput;
    }
  }
  // `fmstack help [VERB]`, as git and most CLIs take it.
  if (argc >= 2 && std::string_view(argv[1]) == "help") {
    if (argc == 2) {
      std::cout << app.help();
      return 0;
    }
    for (const CLI::App* sub : app.get_subcommands({})) {
      if (sub->get_name() == argv[2]) {
        std::cout << sub->help();
        return 0;
      }
    }
    std::cerr << fmt::format("fmstack: no command \"{}\"; `fmstack help` lists them\n", argv[2]);
    return fmstack::cli::kExitBadInput;
  }
  // An unknown option: CLI11 would say only that an argument was not expected.
  if (const std::optional<std::string> unknown = fmstack::cli::UnknownOption(
          app, std::span<char* const>(argv + 1, static_cast<size_t>(argc - 1)))) {
    std::cerr << *unknown << "\n";
    return fmstack::cli::kExitBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return fmstack::cli::ReportParseError(app, e);
  }
  try {
    if (app.got_subcommand("plan")) return plan();
    if (app.got_subcommand("sim")) return sim();
    if (app.got_subcommand("validate")) return validate();
    if (app.got_subcommand("data")) return data();
    if (app.got_subcommand("train")) return train();
    if (app.got_subcommand("generate")) return generate();
    if (app.got_subcommand("serve")) return serve();
    if (app.got_subcommand("run")) return run();
    if (app.got_subcommand("bench")) return bench();
    if (app.got_subcommand("ckpt")) return ckpt();
    if (app.got_subcommand("fault")) return fault();
    if (app.got_subcommand("report")) return report();
    if (app.got_subcommand("agent")) return agent();
    if (app.got_subcommand("node")) return node();
    if (app.got_subcommand("burnin")) return burnin();
    if (app.got_subcommand("slurm")) return slurm();
    if (app.got_subcommand("catalog")) return catalog();
  } catch (const fmstack::Error& e) {
    std::cerr << "fmstack: error: " << e.what() << "\n";
    return fmstack::cli::kExitBadInput;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the file system refused: the user's to fix, not a bug.
    const int code = e.code().value();
    const char* hint = code == EROFS    ? ": a read-only file system; choose a writable directory"
                       : code == ENOSPC ? ": the disk is full; free space or choose another disk"
                       : code == EACCES ? ": permission denied; choose a directory you can write"
                                        : "";
    std::cerr << "fmstack: error: " << e.path1().string() << ": " << e.code().message() << hint
              << "\n";
    return fmstack::cli::kExitBadInput;
  } catch (const std::bad_alloc& e) {
    // An AllocationError says what and how much; a plain one only that it failed.
    const bool named = dynamic_cast<const fmstack::AllocationError*>(&e) != nullptr;
    std::cerr << "fmstack: error: out of memory: " << (named ? e.what() : "an allocation failed")
              << "; " << fmstack::cli::MemoryAvailableText()
              << "; `fmstack plan` shows what the job needs\n";
    return fmstack::cli::kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "fmstack: internal error: " << e.what() << "\n";
    return fmstack::cli::kExitInternal;
  }
  return 1;
}
