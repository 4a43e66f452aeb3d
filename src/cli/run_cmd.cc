// `fmstack run job.toml` trains the job on its cluster's backend: N nodes x P
// worker processes of `fmstack train`, each data-parallel rank with the
// torchrun environment. `fmstack run -- cmd ...` runs any program that way.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <thread>

#include "catalog/catalog.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "cli/run_slurm.h"
#include "health/checks.h"
#include "metrics/samples.h"
#include "runtime/supervisor.h"
#include "spec/job_spec.h"
#include "train/token_file.h"
#include "util/error.h"
#include "util/strict_table.h"
#include "util/text_table.h"
#include "util/units.h"

namespace fmstack::cli {
namespace {

struct RunArgs {
  std::string job;
  std::vector<std::string> command;   // after `--`
  int nodes = 0, procs_per_node = 0;  // 0 = from the job's [cluster]
  std::string out;
  int64_t steps = 0, until = 0;
  std::string resume;
  bool allow_schedule_change = false;
  std::string transport = "auto";
  double grace = 5;
  bool netns = false;
  int max_restarts = -1;  // -1 = resilience.max_restarts (jobs) / 0 (commands)
  int max_procs = 0;      // 0 = from the cores
  double heartbeat_timeout = 30;
  bool health = false;
  double peak_gflops = 0;  // the group's peak matmul GFLOP/s: the MFU denominator
  std::string metrics_listen = "127.0.0.1:0";
  std::string backend;  // "" = the job's [cluster] backend
  std::string partition;
  bool detach = false;
};

// The merged live progress line: the slowest rank's step, rank 0's loss at
// that step (not at its own newer one: after a rank is restored the two
// differ), the job's throughput and the communication share of step time.
class MergedProgress {
 public:
  explicit MergedProgress(int world) : step_(world, 0) {}

  void OnStep(const nlohmann::json& e) {
    const int rank = e.at("rank");
    step_[rank] = e.at("step");
    const int64_t slowest = *std::min_element(step_.begin(), step_.end());
    if (rank == 0) {
      loss_[e.at("step").get<int64_t>()] = e.at("loss").get<double>();  // the newest attempt wins
      steps_ = e.at("steps");
      seconds_ += e.at("step_s").get<double>();
      exposed_ += e.at("comm_exposed_s").get<double>();
      tokens_ += e.at("tokens").get<double>();
      ++seen_;
    }
    loss_.erase(loss_.begin(), loss_.lower_bound(slowest));
    if (slowest == shown_ || seconds_ <= 0 || !loss_.contains(slowest)) return;
    shown_ = slowest;
    const double tok_s = tokens_ / seconds_;
    const double eta =
        static_cast<double>(steps_ - slowest) * seconds_ / static_cast<double>(seen_);
    const std::string line = fmt::format(
        "step {}/{} | loss {:.4f} | {:.0f} tok/s | comm {:.1f}% of step | ETA {}", slowest, steps_,
        loss_.at(slowest), tok_s, 100 * exposed_ / seconds_, units::FormatSeconds(eta));
    line_.Show(slowest, steps_, line);
  }
  void Note(const std::string& line) const { line_.Note(line); }

 private:
  ProgressLine line_;
  std::vector<int64_t> step_;
  int64_t shown_ = 0, steps_ = 0, seen_ = 0;
  std::map<int64_t, double> loss_;  // rank 0's, by step, from the slowest rank's on
  double seconds_ = 0, exposed_ = 0, tokens_ = 0;
};

std::string SelfExe() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot find the fmstack binary through /proc/self/exe: " + ec.message());
  return p.string();
}

void PrintExits(const runtime::RunResult& r, const cluster::LocalLayout& layout) {
  TextTable t({"rank", "node", "local", "exit", "seconds"});
  for (const runtime::RankExit& e : r.exits) {
    t.AddRow(
        {std::to_string(e.rank), std::to_string(e.rank / layout.procs_per_node),
         std::to_string(e.rank % layout.procs_per_node),
         e.signal != 0 ? fmt::format("SIG{}", sigabbrev_np(e.signal)) : std::to_string(e.exit_code),
         fmt::format("{:.1f}", e.seconds)});
  }
  std::cerr << t.RenderText();
}

// A supervisor-restart: the same command again, told to continue the run.
[[noreturn]] void ExecAgain(std::span<char* const> argv) {
  ::setenv("FMSTACK_SUPERVISOR_RESUME", "1", 1);
  std::vector<char*> args(argv.begin(), argv.end());
  args.push_back(nullptr);
  ::execv("/proc/self/exe", args.data());
  throw Error(
      fmt::format("supervisor-restart: cannot exec /proc/self/exe: {}", std::strerror(errno)));
}

int Finish(const runtime::RunResult& r, const cluster::LocalLayout& layout,
           const std::string& run_dir) {
  if (r.ok()) return 0;
  if (r.interrupted) {
    std::cerr << fmt::format(
        "fmstack run: interrupted by SIG{}; {} (logs in {}/logs)\n", sigabbrev_np(r.signal),
        r.saved ? "every rank saved the current step first: `fmstack run` again resumes there"
                : "workers stopped; the newest committed checkpoint is where a rerun resumes",
        run_dir);
    return 128 + r.signal;  // as the shell reports a process that the signal ended
  }
  PrintExits(r, layout);
  std::cerr << fmt::format("fmstack run: job failed after {} restart(s): {}; logs in {}/logs\n",
                           r.restarts, r.failure, run_dir);
  return 1;
}

// The local backend forks every rank on this machine: a typo of a few
// zeros must not fork-bomb it.
void CheckProcessLimit(const cluster::LocalLayout& layout, int max_procs) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int limit = max_procs > 0 ? max_procs : std::max(16, 8 * cores);
  if (static_cast<int64_t>(layout.nodes) * layout.procs_per_node > limit) {
    throw Error(fmt::format(
        "the local backend would start {} nodes x {} processes = {} processes on this machine; "
        "the limit is {} ({}): lower cluster.nodes / procs_per_node, or raise --max-procs",
        layout.nodes, layout.procs_per_node,
        static_cast<int64_t>(layout.nodes) * layout.procs_per_node, limit,
        max_procs > 0 ? "--max-procs" : fmt::format("8 x {} cores, at least 16", cores)));
  }
}

void ApplyResilience(const spec::JobSpec& job, runtime::SuperviseOptions& o) {
  const spec::ResilienceSpec& r = job.resilience;
  o.policy.strategy =
      resilience::ParseStrategy(r.policy).value_or(resilience::Strategy::kCheckpointRestart);
  o.policy.min_dp_fraction = r.min_dp_fraction;
  o.policy.max_restarts = static_cast<int>(r.max_restarts);
  o.policy.backoff_seconds = r.restart_backoff;
  o.monitor = {r.heartbeat_timeout, r.straggler_factor, r.straggler_steps};
  o.notice_deadline = r.notice_deadline;
  o.stop_deadline = r.stop_deadline;
  o.keep_on_hangup = r.on_hangup == "ignore";
  o.node_repair_seconds = r.node_repair;
  o.collective_timeout = r.collective_timeout;
  o.extra_env["FMSTACK_COMM_TIMEOUT_MS"] =
      std::to_string(static_cast<int64_t>(r.collective_timeout * 1000));
  for (const spec::InjectSpec& i : job.faults.inject) {
    if (i.rank >= o.layout.world()) {
      throw SpecError(job.PosOf("faults"), "faults.inject.rank",
                      fmt::format("{}: the run has ranks 0..{}", i.rank, o.layout.world() - 1));
    }
    o.inject.push_back({"", i.kind, static_cast<int>(i.rank), i.at_step});
  }
}

int RunCommand(const RunArgs& args, std::span<char* const> argv) {
  const cluster::LocalLayout layout{std::max(1, args.nodes), std::max(1, args.procs_per_node)};
  CheckProcessLimit(layout, args.max_procs);
  const std::string out = args.out.empty() ? "runs/command" : args.out;
  runtime::SuperviseOptions o;
  o.layout = layout;
  o.argv = args.command;
  o.run_dir = out;
  o.job_name = "command";
  o.job_id = fmt::format("cmd{}", ::getpid());
  o.policy.max_restarts = args.max_restarts;
  o.monitor.heartbeat_timeout = args.heartbeat_timeout;
  o.resume_supervisor = std::getenv("FMSTACK_SUPERVISOR_RESUME") != nullptr;
  o.grace_seconds = args.grace;
  o.metrics_listen = args.metrics_listen;
  o.netns = args.netns;
  o.health.enabled = args.health;
  o.health.self_exe = SelfExe();
  // Everything the program prints goes to the terminal, tagged by rank.
  auto line = [](int rank, bool is_stderr, const std::string& text) {
    (is_stderr ? std::cerr : std::cout) << fmt::format("[rank {}] {}\n", rank, text) << std::flush;
  };
  auto note = [](const std::string& text) { std::cerr << "fmstack run: " << text << "\n"; };
  const runtime::RunResult r = runtime::Supervise(o, nullptr, line, note);
  if (r.reexec) ExecAgain(argv);
  return Finish(r, layout, out);
}

// From a login node: the batch script runs this same command inside the
// allocation, with the run directory made absolute.
int SubmitSlurm(const RunArgs& args, const spec::JobSpec& job, const cluster::LocalLayout& layout,
                const std::string& out, std::span<char* const> argv) {
  std::vector<std::string> words{SelfExe(), "run"};
  size_t i = 0;
  while (i < argv.size() && std::string(argv[i]) != "run") ++i;
  for (++i; i < argv.size(); ++i) {
    const std::string w = argv[i];
    if (w == "--detach" || w.starts_with("--out=") || w.starts_with("--backend=") ||
        w.starts_with("--partition="))
      continue;
    if (w == "--out" || w == "--backend" || w == "--partition") {
      ++i;
      continue;
    }
    words.push_back(w);
  }
  const std::string run_dir = std::filesystem::absolute(out).lexically_normal().string();
  words.insert(words.end(), {"--out", run_dir, "--backend", "slurm"});
  return SubmitToSlurm({.job_name = job.name,
                        .partition = !args.partition.empty() ? args.partition
                                     : job.cluster           ? job.cluster->partition
                                                             : "",
                        .run_dir = run_dir,
                        .nodes = layout.nodes,
                        .spares = job.cluster ? static_cast<int>(job.cluster->spares) : 0,
                        .gpus_per_node = job.cluster && job.cluster->accelerator.name != "cpu"
                                             ? static_cast<int>(job.cluster->instance.accelerators)
                                             : 0,
                        // Slurm may signal up to 60 s early; the save needs
                        // notice_deadline of it.
                        .warn_seconds = static_cast<int>(std::ceil(job.resilience.notice_deadline)),
                        .run_argv = words,
                        .detach = args.detach});
}

// What every worker would fail on at start, said once before any starts: a
// configuration error is never retried as a fault.
void Preflight(const spec::JobSpec& job, const RunArgs& args, const std::string& out) {
  RequireDataDir(job);
  for (const char* split : {"train.bin", "val.bin"}) {
    const std::string path = job.data.dir + "/" + split;
    int64_t vocab = 0;
    try {
      vocab = train::TokenFileVocab(path);
    } catch (const Error& e) {
      throw SpecError(
          job.PosOf("data.dir"), "data.dir",
          fmt::format("{}; `fmstack data prepare --out {}` writes it", e.what(), job.data.dir));
    }
    if (vocab > job.model.vocab) {
      throw SpecError(job.PosOf("data.dir"), "data.dir",
                      fmt::format("{} holds tokens of a {}-token vocabulary, but model.vocab is "
                                  "{}: prepare the data with --vocab {} or raise model.vocab",
                                  path, vocab, job.model.vocab, job.model.vocab));
    }
  }
  if (!args.allow_schedule_change) RequireSameSchedule(job, args.steps, out, args.resume);
}

int RunJob(const RunArgs& args, std::span<char* const> argv) {
  const catalog::Catalog catalog = catalog::Catalog::LoadEmbedded();
  const spec::JobSpec job = spec::LoadJobSpec(args.job, catalog);
  const std::string backend = !args.backend.empty() ? args.backend
                              : job.cluster         ? job.cluster->backend
                                                    : "";
  cluster::LocalLayout layout;
  if (job.cluster && !job.cluster->backend.empty()) {
    layout = {static_cast<int>(job.cluster->nodes), static_cast<int>(job.cluster->procs_per_node)};
  } else if (args.nodes == 0 && args.procs_per_node == 0) {
    throw SpecError(job.PosOf("cluster"), "cluster.backend",
                    "`fmstack run` needs [cluster] backend = \"local\" or \"slurm\" with nodes "
                    "and procs_per_node (or --nodes and --procs-per-node)");
  }
  if (args.nodes > 0) layout.nodes = args.nodes;
  if (args.procs_per_node > 0) layout.procs_per_node = args.procs_per_node;
  const std::string out = args.out.empty() ? "runs/" + job.name : args.out;
  const bool on_slurm = backend == "slurm";
  if (on_slurm) {
    if (args.netns || (job.cluster && job.cluster->netns))
      throw Error("--netns (cluster.netns) is for the local backend; Slurm's nodes are hosts");
    if (job.health.agent || args.health)
      throw Error(
          "on Slurm, node checks run as Slurm's HealthCheckProgram (`fmstack slurm config "
          "--health-check deploy/slurm/fmstack-healthcheck.sh`), which drains failing nodes; "
          "[health] agent and --health are for the local backend");
    if (std::getenv("SLURM_JOB_ID") == nullptr) {
      Preflight(job, args, out);
      return SubmitSlurm(args, job, layout, out, argv);
    }
  } else {
    CheckProcessLimit(layout, args.max_procs);
  }
  Preflight(job, args, out);
  if (!on_slurm) {
    const int64_t ranks = static_cast<int64_t>(layout.nodes) * layout.procs_per_node;
    RequireMemory(job, ranks, ranks);  // every node's processes share this machine
  }
  runtime::SuperviseOptions o;
  o.layout = layout;
  o.argv = {SelfExe(), "train", std::filesystem::absolute(args.job).string(), "--out", out};
  o.workers_coordinate = true;
  if (args.steps > 0) o.argv.insert(o.argv.end(), {"--steps", std::to_string(args.steps)});
  if (args.until > 0) o.argv.insert(o.argv.end(), {"--until", std::to_string(args.until)});
  if (args.peak_gflops > 0)
    o.argv.insert(o.argv.end(), {"--peak-gflops", fmt::format("{}", args.peak_gflops)});
  if (!args.resume.empty()) {
    o.argv.insert(o.argv.end(), {"--resume", std::filesystem::absolute(args.resume).string()});
  }
  o.run_dir = out;
  o.job_name = job.name;
  o.job_id = fmt::format("{}{}", job.name, ::getpid());
  o.grace_seconds = args.grace;
  o.metrics_listen = args.metrics_listen;
  o.extra_env["FMSTACK_COMM_TRANSPORT"] = args.transport;
  o.netns = args.netns || (job.cluster && job.cluster->netns);
  o.checkpoint_dir = job.checkpoint.local_dir.empty() ? out + "/ckpt" : job.checkpoint.local_dir;
  if (job.cluster && job.cluster->backend == "local")
    o.spares = static_cast<int>(std::min<int64_t>(job.cluster->spares, 64));
  o.resume_supervisor = std::getenv("FMSTACK_SUPERVISOR_RESUME") != nullptr;
  ApplyResilience(job, o);
  if (args.max_restarts >= 0) o.policy.max_restarts = args.max_restarts;
  if (on_slurm) UseAllocation(o);
  const spec::HealthSpec& h = job.health;
  o.health = {.enabled = h.agent || args.health,
              .self_exe = SelfExe(),
              .checks_file = h.checks,
              .devices = h.devices,
              .auto_actions = h.auto_actions,
              .reboot_seconds = h.reboot_time,
              .replace_seconds = h.replace_time,
              .reboot_command = h.reboot_command,
              .burnin_expect = h.burnin,
              .burnin_tolerance = h.burnin_tolerance,
              .burnin_seconds = h.burnin_seconds};
  // A malformed check table stops the run here, not in every agent.
  if (o.health.enabled && !h.checks.empty())
    (void)health::ParseCheckTable(ReadTextFile(h.checks), h.checks);
  std::cerr << fmt::format(
      "fmstack run: {} on the {} backend: {} nodes x {} processes{}; logs in {}\n", job.name,
      on_slurm ? "slurm" : "local", layout.nodes, layout.procs_per_node,
      o.netns ? " (nodes in network namespaces)" : "", out + "/logs");

  MergedProgress progress(layout.world());
  nlohmann::json done;
  auto event = [&](int rank, const std::string& text) {
    try {
      const nlohmann::json e = nlohmann::json::parse(text);
      const std::string ev = e.at("ev");
      if (ev == "step") progress.OnStep(e);
      if (ev == "eval") {
        progress.Note(
            fmt::format("step {}: train loss {:.4f}, held-out loss {:.4f} (unigram {:.3f})",
                        e.at("step").get<int64_t>(), e.at("loss").get<double>(),
                        e.at("val_loss").get<double>(), e.at("unigram").get<double>()));
      }
      if (ev == "done") done = e;
    } catch (const std::exception& ex) {
      progress.Note(fmt::format("[rank {}] unreadable event ({}): {}", rank, ex.what(), text));
    }
  };
  auto line = [&](int rank, bool is_stderr, const std::string& text) {
    if (is_stderr) progress.Note(fmt::format("[rank {}] {}", rank, text));
  };
  auto note = [&](const std::string& text) { progress.Note("fmstack run: " + text); };
  // After every other check (a refused run leaves no directory behind): a
  // checkpoint directory another job owns is refused here, once, before any
  // worker starts; each rank's engine checks again (on Slurm, only they can).
  if (!on_slurm) {
    for (const auto& tier : MakeCheckpointTiers(job.checkpoint, out + "/ckpt"))
      tier->Claim(CheckpointOwner(job.name, out), /*lock=*/false);
  }
  const runtime::RunResult r = runtime::Supervise(o, event, line, note);
  if (r.reexec) ExecAgain(argv);
  if (!r.ledger.incidents().empty() || !r.ok()) {
    std::cerr << "\ngoodput (" << out << "/goodput.json; `fmstack report " << out << "`):\n"
              << r.ledger.RenderText() << "\n";
  }
  if (!r.ok() || done.is_null()) {
    const int code = Finish(r, layout, out);
    if (code != 0) return code;
    throw Error("rank 0 finished without a summary; see " + out + "/logs/rank0.log");
  }
  TextTable t({"metric", "value"});
  t.AddRow({"workers",
            fmt::format("{} nodes x {} processes = {} ranks, {} over {}", layout.nodes,
                        layout.procs_per_node, layout.world(), done.at("mode").get<std::string>(),
                        done.at("transport").get<std::string>())});
  // Rank 0's summary covers its last attempt only: after a restart, say so.
  const bool restarted = r.restarts > 0;
  const std::string attempt = restarted ? " (rank 0's last attempt)" : "";
  t.AddRow({"steps", restarted ? fmt::format("{} (the last attempt trained from step {})",
                                             done.at("steps").get<int64_t>(),
                                             done.at("first").get<int64_t>())
                               : fmt::format("{} (from {})", done.at("steps").get<int64_t>(),
                                             done.at("first").get<int64_t>())});
  t.AddRow({"tokens" + attempt, units::FormatCount(done.at("tokens").get<double>())});
  t.AddRow({"time" + attempt, units::FormatSeconds(done.at("seconds").get<double>())});
  t.AddRow(
      {"throughput" + attempt, fmt::format("{:.0f} tokens/s", done.at("tok_s").get<double>())});
  t.AddRow({"communication share of step time",
            fmt::format("{:.1f}% (rank 0, time waiting for collectives)",
                        100 * done.at("comm_share").get<double>())});
  t.AddRow({"train loss (last step)", fmt::format("{:.4f}", done.at("loss").get<double>())});
  t.AddRow({"held-out loss", fmt::format("{:.4f}", done.at("val_loss").get<double>())});
  t.AddRow({"unigram entropy", fmt::format("{:.4f}", done.at("unigram").get<double>())});
  t.AddRow({"parameter hash", done.at("param_hash").get<std::string>()});
  t.AddRow({"checkpoint", done.at("state").get<std::string>()});
  t.AddRow({"restarts", fmt::format("{} ({} fault(s))", r.restarts, r.ledger.incidents().size())});
  std::optional<metrics::SampleAudit> samples;
  if (std::filesystem::exists(out + "/samples")) {
    // A run started from another run's checkpoint has no record of its steps.
    samples =
        metrics::AuditSamples(out, args.resume.empty() ? 1 : 0, done.at("steps").get<int64_t>(),
                              done.value("grad_accum", int64_t{0}));
    t.AddRow({"samples", samples->Summary()});
  }
  t.AddRow({"goodput",
            fmt::format("{:.1f}% of wall time in productive steps", 100 * r.ledger.Goodput())});
  t.AddRow({"wall time (incl. start-up)", units::FormatSeconds(r.seconds)});
  std::cout << t.RenderText();
  if (samples && !samples->ok()) {
    std::cerr << "fmstack run: the sample ledger (" << out << "/samples) shows:\n";
    for (const std::string& p : samples->problems) std::cerr << "  " << p << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

Runner AddRunCommand(CLI::App& app, std::span<char* const> argv) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand(
      "run",
      "run a job on its cluster backend (local: N nodes x P processes on this machine), "
      "or `fmstack run [--nodes N --procs-per-node P] -- COMMAND...` for any program");
  // CLI11 hands words after `--` to the positionals in order, so whether this
  // is a job or a command is decided on argv itself.
  const bool command_mode =
      std::any_of(argv.begin(), argv.end(), [](const char* w) { return std::string(w) == "--"; });
  if (command_mode) {
    cmd->add_option("command", args->command, "the program to run on every rank")->required();
  } else {
    cmd->add_option("job", args->job, "job spec (TOML)")->required()->check(ExistingFile());
  }
  cmd->add_option("--nodes", args->nodes, "nodes (overrides cluster.nodes)")->check(Positive());
  cmd->add_option("--procs-per-node", args->procs_per_node,
                  "worker processes per node (overrides cluster.procs_per_node)")
      ->check(Positive());
  cmd->add_option("--out", args->out, "output directory (default runs/<job name>)");
  cmd->add_option("--steps", args->steps, "optimizer steps (overrides train.steps)")
      ->check(Positive());
  cmd->add_option("--until", args->until,
                  "stop after this step (the learning-rate schedule still spans train.steps)")
      ->check(Positive());
  cmd->add_flag("--allow-schedule-change", args->allow_schedule_change,
                "resume a checkpoint written under another schedule (train.steps, learning "
                "rates, warm-up, tokens per step): the steps after it follow the new one");
  cmd->add_option("--resume", args->resume,
                  "checkpoint to start from when the run has none of its own: a run's ckpt/ "
                  "directory or a step-N directory in it (any world size or ZeRO stage)")
      ->check(ExistingDirectory());
  cmd->add_option("--transport", args->transport,
                  "auto: shared memory inside a node, TCP across nodes; tcp: the TCP mesh "
                  "everywhere; gloo: Gloo everywhere (the reference)")
      ->check(OneOf({"auto", "tcp", "gloo"}));
  cmd->add_option("--backend", args->backend,
                  "where the ranks run (default: cluster.backend): local processes, or a Slurm "
                  "batch job with a srun step per rank")
      ->check(OneOf({"local", "slurm"}));
  cmd->add_option("--partition", args->partition,
                  "Slurm partition (default: cluster.partition, else the cluster's default)");
  cmd->add_flag("--detach", args->detach,
                "Slurm: print the job id once submitted instead of following the job");
  cmd->add_flag("--netns", args->netns,
                "put every node in its own network namespace on a bridge (root; cluster.netns)");
  cmd->add_option("--grace", args->grace,
                  "seconds the other workers get to exit after one fails, before SIGTERM/SIGKILL")
      ->check(NonNegative());
  cmd->add_option("--max-restarts", args->max_restarts,
                  "automatic restarts after a fault (default: resilience.max_restarts for a job, "
                  "0 for a command, as torchrun)")
      ->check(Between(0, 1000));
  cmd->add_option("--metrics-listen", args->metrics_listen,
                  "serve Prometheus metrics at HOST:PORT/metrics (PORT 0: any free one; off: "
                  "none); RUN_DIR/metrics/ has the bearer token and a file_sd target file")
      ->default_val("127.0.0.1:0");
  cmd->add_option("--peak-gflops", args->peak_gflops,
                  "the whole group's peak matmul GFLOP/s, for MFU (fmstack_mfu); on the local "
                  "backend this machine's sgemm: `fmstack burnin --threads N` measures it")
      ->check(Positive());
  cmd->add_flag("--health", args->health,
                "start a health agent on every node slot (the built-in checks; a job's [health] "
                "table configures them)");
  cmd->add_option("--max-procs", args->max_procs,
                  "most worker processes the local backend may start (default 8 x cores, at "
                  "least 16)")
      ->check(Between(1, 1 << 20));
  cmd->add_option("--heartbeat-timeout", args->heartbeat_timeout,
                  "a command's rank that sent heartbeats and then none for this long is hung "
                  "(jobs: resilience.heartbeat_timeout)")
      ->check(Positive());
  return [args, argv] {
    if (args->command.empty()) return RunJob(*args, argv);
    if (args->max_restarts < 0) args->max_restarts = 0;
    return RunCommand(*args, argv);
  };
}

}  // namespace fmstack::cli
