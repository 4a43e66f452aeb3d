// `fmstack train job.toml`: the reference trainer on this machine's CPU.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>

#include "catalog/catalog.h"
#include "ckpt/restore.h"
#include "ckpt/tier.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "cli/train_checkpoint.h"
#include "cli/train_peers.h"
#include "comm/hier_comm.h"
#include "gpt/sgemm_peak.h"
#include "health/checks.h"
#include "metrics/samples.h"
#include "runtime/supervisor.h"
#include "runtime/worker.h"
#include "spec/job_spec.h"
#include "train/checkpoint.h"
#include "train/corpus.h"
#include "train/trainer.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/text_table.h"
#include "util/units.h"
#include "workload/memory.h"
#include "workload/shape.h"

namespace fmstack::cli {
namespace {

struct TrainArgs {
  std::string job;
  int64_t steps = 0;
  int64_t until = 0;  // stop after this step; the schedule still spans all steps
  int threads = -1;
  std::string resume;
  std::string out;
  double peak_gflops = 0;
  bool allow_schedule_change = false;
};

train::TrainConfig ConfigFromSpec(const spec::JobSpec& job, int64_t steps_override) {
  train::TrainConfig c;
  c.shape = job.model;
  c.backend = job.train.device;
  c.device_index = static_cast<int>(job.train.device_index);
  c.matmul = *gpt::ParseMatmul(job.train.matmul);  // the spec accepts only the three names
  c.micro_batch = job.train.micro_batch;
  const int64_t global = job.train.global_batch > 0 ? job.train.global_batch : c.micro_batch;
  if (global % c.micro_batch != 0) {
    throw SpecError(job.PosOf("train.global_batch"), "train.global_batch",
                    fmt::format("{} is not a multiple of micro_batch {}", global, c.micro_batch));
  }
  c.grad_accum = global / c.micro_batch;
  c.steps = steps_override > 0 ? steps_override : job.train.steps;
  if (c.steps == 0 && job.train.tokens > 0) {
    c.steps = static_cast<int64_t>(job.train.tokens / static_cast<double>(c.tokens_per_step()));
  }
  if (c.steps <= 0) {
    throw SpecError(job.PosOf("train"), "train.steps", "set train.steps or train.tokens");
  }
  c.seed = static_cast<uint64_t>(job.train.seed);
  const spec::OptimSpec& o = job.optim;
  c.optim = {o.lr, o.min_lr, o.warmup_steps, o.weight_decay, o.beta1, o.beta2, o.eps, o.grad_clip};
  return c;
}

train::DpConfig DpFromSpec(const spec::JobSpec& job) {
  const int stage = job.layout.zero_stage;
  if (stage > 2) {
    throw SpecError(job.PosOf("parallel"), "parallel.zero_stage",
                    "3 (FSDP) is outside the reference trainer, which shards with 0 (DDP), 1 or 2");
  }
  train::DpConfig dp;
  dp.mode = stage == 0   ? train::DpMode::kDdp
            : stage == 1 ? train::DpMode::kZero1
                         : train::DpMode::kZero2;
  if (const char* overlap = std::getenv("FMSTACK_DP_OVERLAP"))
    dp.overlap = std::string(overlap) != "0";
  return dp;
}

// FMSTACK_RESTORE_MAX_STEP: set by the supervisor after a silent corruption.
std::optional<int64_t> RestoreLimit() {
  const char* v = std::getenv("FMSTACK_RESTORE_MAX_STEP");
  if (v == nullptr) return std::nullopt;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || n < 0)
    throw Error(fmt::format("FMSTACK_RESTORE_MAX_STEP={}: expected a step number", v));
  return n;
}

// The words every rank shares after each step: a stop request, its
// replica's hash, and the micro-batches it trained (for the sample ledger).
enum StepWord : size_t { kStop, kHash, kMicroFirst, kMicroCount, kStepWords };

// A message when the hashes differ.
std::optional<std::string> CompareReplicas(const std::vector<uint64_t>& words, int world) {
  std::string hashes;
  bool differ = false;
  for (int r = 0; r < world; ++r) {
    const uint64_t h = words[kStepWords * static_cast<size_t>(r) + kHash];
    differ = differ || h != words[kHash];
    hashes += fmt::format("{}rank {} {:016x}", r == 0 ? "" : ", ", r, h);
  }
  if (!differ) return std::nullopt;
  return "parameter replicas differ (silent data corruption): " + hashes;
}

// The rank whose hash no other rank shares, when there is exactly one; else -1.
int BlamedReplica(const std::vector<uint64_t>& words, int world) {
  int blamed = -1;
  for (int r = 0; r < world; ++r) {
    int same = 0;
    for (int o = 0; o < world; ++o)
      same += words[kStepWords * static_cast<size_t>(o) + kHash] ==
              words[kStepWords * static_cast<size_t>(r) + kHash];
    if (same == 1 && world >= 3) {
      if (blamed >= 0) return -1;
      blamed = r;
    }
  }
  return blamed;
}

// An injected stall: the main thread stops here, as in a deadlock or a file
// system call that never returns, while the heartbeat thread goes on. The
// supervisor finds the rank by its peers' failed collectives and kills it;
// should it never do so, the stall ends in an error rather than forever.
[[gnu::noinline]] void StallMainThread(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  throw Error(
      fmt::format("injected stall: this rank was still running {:.0f} s later, and the "
                  "supervisor had not stopped it",
                  seconds));
}

// A collective failed and no rank was reported dead: a peer may have stalled
// with its heartbeats going on. Only the supervisor sees which rank did not
// fail as well, so this rank says so, and without a checkpointless policy
// waits for the supervisor's decision (a kill) rather than exiting first and
// being blamed for the fault.
void ReportCollectiveFailure(runtime::Worker& control, const spec::JobSpec& job, int64_t step,
                             int64_t generation, const comm::CommError& e, bool waits_itself) {
  if (e.failed_rank() >= 0 || !control.active()) return;
  control.Send({{"ev", "collective-failed"},
                {"step", step},
                {"generation", generation},
                {"what", std::string(e.what())}});
  if (waits_itself) return;  // TrainPeers::Recover waits for the supervisor's rejoin
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(job.resilience.collective_timeout * 1000));
  (void)control.WaitCommand("stop", timeout);
}

// Commands from the supervisor, applied at a step boundary.
struct Rehearsal {
  bool stop = false;  // save this step and exit (notice, signal, straggler)
  bool flip = false;  // flip a parameter bit after the next step
  bool exit_now = false;
  bool stall = false;

  void Take(runtime::Worker& control, train::Trainer& trainer, TrainCheckpointer& checkpoints,
            TrainPeers& peers, double mean_step_seconds) {
    for (const nlohmann::json& c : control.TakeCommands()) {
      const std::string cmd = c.value("cmd", "");
      if (cmd == "stop") stop = true;
      if (cmd != "inject") continue;
      const std::string kind = c.value("kind", "");
      if (kind == "nan") trainer.PoisonNextGradient();
      if (kind == "bitflip") flip = true;
      if (kind == "exit") exit_now = true;
      if (kind == "stall") stall = true;
      if (kind == "disk-full") checkpoints.FailNextWrite();
      if (kind == "kill-during-save") checkpoints.DieDuringNextSave();
      if (kind == "corrupt-replica") peers.CorruptHeldCopies();
      // Slow enough that its peers' median is well under straggler_factor.
      if (kind == "straggler") trainer.SlowDown(3 * mean_step_seconds + 0.05);
      std::cerr << fmt::format("fault injection: {} on rank {}\n", kind, trainer.rank());
    }
  }
};

// The newest committed step of `tier` no newer than `limit`, with its
// manifest; nullopt when it holds none that reads, or cannot be listed (an
// unreachable tier: the workers' engine says so and goes on without it).
std::optional<std::pair<int64_t, ckpt::Manifest>> NewestManifest(ckpt::Tier& tier,
                                                                 std::optional<int64_t> limit) {
  std::vector<ckpt::StepListing> listing;
  try {
    listing = tier.List();
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::vector<int64_t> steps;
  for (const ckpt::StepListing& l : listing) {
    if (l.committed && (!limit || l.step <= *limit)) steps.push_back(l.step);
  }
  std::sort(steps.rbegin(), steps.rend());
  for (const int64_t step : steps) {
    try {
      return std::pair{step, ckpt::ReadManifest(tier, step)};
    } catch (const Error&) {
      // A bad copy: the workers fall back past it the same way.
    }
  }
  return std::nullopt;
}

}  // namespace

void RequireSameSchedule(const spec::JobSpec& job, int64_t steps_override,
                         const std::string& run_dir, const std::string& resume) {
  // What the workers restore: the run's own newest checkpoint, else --resume's.
  // A run that saved anything has its local tier; looking creates nothing.
  std::optional<std::pair<int64_t, ckpt::Manifest>> newest;
  std::string where;
  const std::string local =
      job.checkpoint.local_dir.empty() ? run_dir + "/ckpt" : job.checkpoint.local_dir;
  if (std::filesystem::is_directory(local)) {
    for (const auto& tier : MakeCheckpointTiers(job.checkpoint, run_dir + "/ckpt")) {
      const auto found = NewestManifest(*tier, std::nullopt);
      if (found && (!newest || found->first > newest->first)) {
        newest = found;
        where = tier->Where(found->first, "");
      }
    }
  }
  if (!newest && !resume.empty()) {
    ckpt::CheckpointDir dir = ckpt::OpenCheckpointDir(resume);
    newest = NewestManifest(*dir.tier, dir.step);
    if (newest) where = dir.tier->Where(newest->first, "");
  }
  if (!newest) return;
  const std::string change =
      train::ScheduleChange(ConfigFromSpec(job, steps_override), newest->second);
  if (change.empty()) return;
  throw SpecError(job.PosOf("train"), "train",
                  fmt::format("{} was written under another schedule ({}): the steps after it "
                              "would follow the new one; add --allow-schedule-change to continue "
                              "under the new schedule, or keep the values it was written under",
                              where, change));
}

namespace {

int RunTrain(const TrainArgs& args) {
  const catalog::Catalog catalog = catalog::Catalog::LoadEmbedded();
  const spec::JobSpec job = spec::LoadJobSpec(args.job, catalog);
  RequireDataDir(job);
  // A worker started by `fmstack run` (or torchrun) trains data-parallel.
  const bool distributed = std::getenv("WORLD_SIZE") != nullptr;
  if (!distributed) RequireMemory(job, 1, 1);  // `fmstack run` checked its workers together
  const bool worker = std::getenv("FMSTACK_RUN") != nullptr;
  const std::string out = args.out.empty() ? "runs/" + job.name : args.out;
  // Under `fmstack run` the supervisor checked before starting the workers.
  if (!worker && !args.allow_schedule_change)
    RequireSameSchedule(job, args.steps, out, args.resume);
  int threads = args.threads >= 0 ? args.threads : static_cast<int>(job.train.threads);
  if (distributed && threads == 0 && std::getenv("OMP_NUM_THREADS") != nullptr) {
    threads = std::atoi(std::getenv("OMP_NUM_THREADS"));
  }
  gpt::SetCpuThreads(threads);
  // Under `fmstack run`: heartbeats, fault reports and the supervisor's commands.
  const std::unique_ptr<runtime::Worker> control = runtime::Worker::FromEnv(
      std::chrono::milliseconds(static_cast<int64_t>(job.resilience.heartbeat_interval * 1000)));
  control->Progress(0, "start");
  // A scheduler's SIGTERM reaches every process of the job at once: the
  // supervisor coordinates the save instead of this process dying of it.
  control->CoordinateSignals();
  if (job.train.device == "cuda") {
    if (const std::string why = gpt::CudaUnavailableReason(); !why.empty())
      throw SpecError(job.PosOf("train.device"), "train.device", "\"cuda\": " + why);
  }
  train::TrainConfig config = ConfigFromSpec(job, args.steps);
  // One device per process on a node: local rank r takes device_index + r.
  if (const char* local = std::getenv("LOCAL_RANK"); distributed && local != nullptr)
    config.device_index += std::atoi(local);
  config.init_params = !TrainPeers::Joining();
  config.uneven_split = job.resilience.policy == "elastic";
  const train::TokenFile train_tokens = train::TokenFile::Load(job.data.dir + "/train.bin");
  const train::TokenFile val_tokens = train::TokenFile::Load(job.data.dir + "/val.bin");
  std::unique_ptr<comm::Communicator> comm;
  if (distributed) comm = comm::Connect(comm::OptionsFromEnv());
  const train::DpConfig dp = DpFromSpec(job);
  train::Trainer trainer(config, train_tokens, comm.get(), dp);
  // The group's rank 0 speaks for it; after an elastic shrink that may be
  // another process than at the start.
  const auto lead = [&trainer] { return trainer.rank() == 0; };
  const ProgressLine progress;
  std::filesystem::create_directories(out);
  // Under `fmstack run` the supervisor holds the directory for all ranks;
  // under another launcher, rank 0 does.
  std::optional<DirLock> lock;
  const char* rank_env = std::getenv("RANK");
  if (!worker && (!distributed || (rank_env != nullptr && std::string(rank_env) == "0")))
    lock.emplace(out, "run.lock", "`fmstack train`");
  control->Progress(0, "restore");
  TrainCheckpointer checkpoints(
      job, catalog, out, trainer,
      [&](const std::string& line) {
        if (lead()) progress.Note(line);
      },
      TrainPeers::Joining());
  checkpoints.OnCommitted([&](int64_t step, const std::string& tier, double seconds) {
    control->Send({{"ev", "commit"}, {"step", step}, {"tier", tier}, {"seconds", seconds}});
  });
  // The run's own newest checkpoint wins (a restarted worker continues its
  // run); --resume starts a run that has none from another run's checkpoint.
  // Either no newer than the supervisor allows after a silent corruption.
  // A replacement for a lost rank takes its state from its peers' memory.
  TrainPeers peers(job, *control, trainer, checkpoints, comm);
  if (peers.replacement()) {
    if (!peers.Join()) return runtime::kFaultExitCode;
  } else {
    if (!args.resume.empty() && !checkpoints.HasOwn()) {
      checkpoints.Resume(RestoreLimit(), args.resume);
    } else {
      checkpoints.Resume(RestoreLimit());
    }
    control->Send(
        {{"ev", "restore"}, {"step", trainer.step()}, {"seconds", checkpoints.restore_seconds()}});
  }

  const int64_t T = config.shape.seq_len;
  const double flops_per_token = workload::TrainingFlopsPerToken(config.shape).detailed;
  // Measuring sgemm while other ranks train would measure the contention.
  const double peak = args.peak_gflops > 0 ? args.peak_gflops
                      : distributed        ? 0
                                           : trainer.model().MatmulGflops(gpt::TrainingGemms(
                                                 config.micro_batch * T, config.shape.hidden,
                                                 config.shape.ffn_hidden, config.shape.vocab));
  const std::string ckpt_root =
      job.checkpoint.local_dir.empty() ? out + "/ckpt" : job.checkpoint.local_dir;
  auto state_path = [&] { return ckpt_root + "/" + ckpt::StepDirName(trainer.step()); };
  if (lead()) {
    std::cerr << fmt::format(
        "training {} ({} params) on {} x {} ({}): {} steps x {} tokens, from step {}\n",
        config.shape.name, units::FormatCount(static_cast<double>(trainer.model().params().size())),
        trainer.world(), trainer.model().Hardware(),
        comm ? fmt::format("{} over {}", train::DpModeName(dp.mode), comm->name()) : "1 process",
        config.steps, config.tokens_per_step(), trainer.step());
  }

  const double unigram = train::UnigramEntropy(train_tokens.tokens, train_tokens.vocab);
  double seconds = 0, last_loss = 0, val_loss = 0, comm_exposed = 0;
  const int64_t first = trainer.step();
  const int64_t last = args.until > 0 ? std::min(args.until, config.steps) : config.steps;
  Rehearsal rehearsal;
  // Under `fmstack run`: which micro-batches each step trained, per rank.
  std::optional<metrics::SampleLedger> samples;
  const char* started = std::getenv("FMSTACK_RUN_STARTED");
  const int64_t run_started = started != nullptr ? std::atoll(started) : 0;
  if (const char* run_dir = std::getenv("FMSTACK_RUN_DIR"); worker && distributed && run_dir) {
    const char* slot = std::getenv("FMSTACK_SLOT");
    samples.emplace(fmt::format("{}/samples/rank{}.jsonl", run_dir,
                                slot != nullptr ? slot : std::to_string(trainer.rank())));
  }
  int64_t verified = trainer.step();  // newest step whose replicas were checked equal
  // A save reported once the next step has released it (its whole cost).
  std::optional<ckpt::SaveTiming> pending_ckpt;
  try {
    while (trainer.step() < last) {
      try {
        control->Progress(trainer.step(), "train");
        rehearsal.Take(*control, trainer, checkpoints, peers,
                       seconds / static_cast<double>(std::max<int64_t>(1, trainer.step() - first)));
        if (rehearsal.exit_now) return 3;
        if (rehearsal.stall) StallMainThread(4 * job.resilience.collective_timeout + 60);
        // A release outside a step (a recovery's) is not this step's time.
        (void)checkpoints.TakeReleaseSeconds();
        train::StepStats s = trainer.Step();
        // A live save's release ran inside the step (before its update):
        // checkpoint time, not training time, in the throughput and in the
        // supervisor's ledger, which gets the save's whole cost now.
        const double release = checkpoints.TakeReleaseSeconds();
        s.seconds -= release;
        if (pending_ckpt) {
          control->Send({{"ev", "ckpt"},
                         {"step", pending_ckpt->step},
                         {"blocking_s", pending_ckpt->blocking_seconds + release}});
          pending_ckpt.reset();
        }
        seconds += s.seconds;
        comm_exposed += s.comm.exposed;
        last_loss = s.loss;
        if (std::exchange(rehearsal.flip, false))
          trainer.FlipParameterBit(trainer.model().params().size() / 3, 22);
        // One small all-gather per step carries every rank's stop request and
        // its replica's hash: all ranks stop at the same step, and a replica
        // that differs is caught before it can be checkpointed.
        bool stop = !distributed && rehearsal.stop;  // one process: its own request
        if (control->active() && distributed) {
          const int64_t every = job.resilience.replica_check_every;
          const bool check = every > 0 && s.step % every == 0;
          const comm::Range micro = trainer.MicroBatches();
          const std::vector<uint64_t> words = trainer.AllWords(std::array<uint64_t, kStepWords>{
              rehearsal.stop ? 1u : 0u, check ? trainer.ParamHash() : 0, micro.begin, micro.count});
          if (samples) {
            metrics::SampleRecord rec{.run = run_started,
                                      .generation = peers.generation(),
                                      .step = s.step,
                                      .micro_batch = config.micro_batch,
                                      .ranges = {}};
            for (size_t r = 0; r < words.size(); r += kStepWords) {
              rec.ranges.emplace_back(static_cast<int64_t>(words[r + kMicroFirst]),
                                      static_cast<int64_t>(words[r + kMicroCount]));
            }
            samples->Append(rec);
          }
          if (check) {
            if (const std::optional<std::string> bad = CompareReplicas(words, trainer.world())) {
              control->Send({{"ev", "fault"},
                             {"kind", "silent-corruption"},
                             {"rank", BlamedReplica(words, trainer.world())},
                             {"step", s.step},
                             {"verified_step", verified},
                             {"what", fmt::format("step {}: {}", s.step, *bad)}});
              std::cerr << fmt::format("step {}: {}\n", s.step, *bad);
              return runtime::kFaultExitCode;
            }
            verified = s.step;
          }
          for (size_t r = 0; r < words.size(); r += kStepWords)
            stop = stop || words[r + kStop] != 0;
        } else if (!distributed) {
          verified = s.step;
        }
        if (stop) {
          control->Progress(s.step, "checkpoint");
          const ckpt::SaveTiming t = checkpoints.SaveNow();
          checkpoints.Finish();
          control->Send({{"ev", "stopped"}, {"step", s.step}, {"blocking_s", t.blocking_seconds}});
          if (lead()) progress.Note(fmt::format("step {}: saved and stopped on request", s.step));
          return 0;
        }
        const double replica_s = peers.AfterStep();
        seconds += replica_s;
        control->Progress(s.step, "checkpoint");
        pending_ckpt = checkpoints.AfterStep(s.seconds, last);
        control->Progress(s.step, "train");
        const double tok_s =
            static_cast<double>((s.step - first) * config.tokens_per_step()) / seconds;
        const double mfu = peak > 0 ? tok_s * flops_per_token / (peak * 1e9) : 0;
        if (worker) {
          EmitEvent({{"ev", "step"},
                     {"rank", trainer.rank()},
                     {"step", s.step},
                     {"steps", config.steps},
                     {"loss", s.loss},
                     {"lr", s.lr},
                     {"grad_norm", s.grad_norm},
                     {"step_s", s.seconds},
                     {"comm_busy_s", s.comm.busy},
                     {"comm_exposed_s", s.comm.exposed},
                     {"replica_s", replica_s},
                     {"verified", verified},
                     {"tokens", config.tokens_per_step()},
                     {"flops_per_token", flops_per_token},
                     {"peak_flops", peak * 1e9}});
        } else if (lead())
          progress.Show(
              s.step, config.steps,
              fmt::format("step {}/{} | loss {:.4f} | lr {:.2e} | |g| {:.2f} | {:.0f} tok/s | "
                          "MFU {:.0f}% | ETA {}",
                          s.step, config.steps, s.loss, s.lr, s.grad_norm, tok_s, 100 * mfu,
                          units::FormatSeconds(static_cast<double>(config.steps - s.step) *
                                               seconds / static_cast<double>(s.step - first))));
        const int64_t every = job.train.eval_interval;
        if ((every > 0 && s.step % every == 0) || s.step == last) {
          if (!lead()) continue;
          val_loss = trainer.Evaluate(val_tokens, job.train.eval_batches);
          if (worker) {
            EmitEvent({{"ev", "eval"},
                       {"step", s.step},
                       {"loss", s.loss},
                       {"val_loss", val_loss},
                       {"unigram", unigram},
                       {"state", state_path()}});
          } else {
            progress.Note(
                fmt::format("step {}: train loss {:.4f}, held-out loss {:.4f} (unigram {:.3f})",
                            s.step, s.loss, val_loss, unigram));
          }
        }
      } catch (const comm::CommError& e) {
        ReportCollectiveFailure(*control, job, trainer.step(), peers.generation(), e,
                                peers.enabled());
        // A peer was lost: under a checkpointless policy this rank keeps
        // its process and memory and goes on with the replacement.
        if (!peers.enabled()) throw;
        if (!peers.Recover(e)) return runtime::kFaultExitCode;
        verified = std::min(verified, trainer.step());
      }
    }
    control->Progress(trainer.step(), "checkpoint");
    if (pending_ckpt) {  // the last save: no step released it, training is over
      control->Send({{"ev", "ckpt"},
                     {"step", pending_ckpt->step},
                     {"blocking_s", pending_ckpt->blocking_seconds}});
    }
    checkpoints.Finish();
  } catch (const train::NonFiniteError& e) {
    control->Send(
        {{"ev", "fault"}, {"kind", "non-finite"}, {"step", e.step()}, {"what", e.what()}});
    if (!control->active()) throw;
    std::cerr << e.what() << "\n";
    return runtime::kFaultExitCode;
  } catch (const CheckpointFailed& e) {
    control->Send({{"ev", "fault"},
                   {"kind", "checkpoint-failed"},
                   {"rank", trainer.rank()},
                   {"step", trainer.step()},
                   {"gen", peers.generation()},
                   {"what", fmt::format("rank {}: {}", trainer.rank(), e.what())}});
    if (!control->active()) throw;
    std::cerr << e.what() << "\n";
    return runtime::kFaultExitCode;
  }
  if (!lead()) return 0;
  const double tokens = static_cast<double>((trainer.step() - first) * config.tokens_per_step());
  const double tok_s = seconds > 0 ? tokens / seconds : 0;
  if (worker) {
    EmitEvent({{"ev", "done"},
               {"steps", trainer.step()},
               {"first", first},
               {"tokens", tokens},
               {"seconds", seconds},
               {"tok_s", tok_s},
               {"loss", last_loss},
               {"val_loss", val_loss},
               {"unigram", unigram},
               {"comm_share", seconds > 0 ? comm_exposed / seconds : 0},
               {"param_hash", fmt::format("{:016x}", trainer.ParamHash())},
               {"state", state_path()},
               {"world", trainer.world()},
               {"grad_accum", config.grad_accum},
               {"mode", comm ? train::DpModeName(dp.mode) : "single"},
               {"transport", comm ? comm->name() : "none"}});
    return 0;
  }
  TextTable t({"metric", "value"});
  t.AddRow({"steps", fmt::format("{} (from {})", trainer.step(), first)});
  t.AddRow({"tokens", units::FormatCount(tokens)});
  t.AddRow({"time", units::FormatSeconds(seconds)});
  t.AddRow({"throughput", fmt::format("{:.0f} tokens/s", tok_s)});
  t.AddRow({"model FLOP/s", fmt::format("{:.1f} GFLOP/s", tok_s * flops_per_token / 1e9)});
  if (peak > 0) {
    t.AddRow(
        {"MFU vs measured sgemm", fmt::format("{:.1f}% of {:.0f} GFLOP/s",
                                              100 * tok_s * flops_per_token / (peak * 1e9), peak)});
  }
  if (comm) {
    t.AddRow({"data parallel", fmt::format("{} x {} over {}", trainer.world(),
                                           train::DpModeName(dp.mode), comm->name())});
    t.AddRow({"communication share of step time",
              fmt::format("{:.1f}%", seconds > 0 ? 100 * comm_exposed / seconds : 0)});
  }
  t.AddRow({"train loss (last step)", fmt::format("{:.4f}", last_loss)});
  t.AddRow({"held-out loss", fmt::format("{:.4f}", val_loss)});
  t.AddRow({"unigram entropy", fmt::format("{:.4f}", unigram)});
  t.AddRow({"parameter hash", fmt::format("{:016x}", trainer.ParamHash())});
  t.AddRow({"state", state_path()});
  std::cout << t.RenderText();
  return 0;
}

}  // namespace

Runner AddTrainCommand(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "train the job's GPT model on this machine's CPU");
  cmd->add_option("job", args->job, "job spec (TOML)")->required()->check(ExistingFile());
  cmd->add_option("--steps", args->steps, "optimizer steps (overrides train.steps)")
      ->check(Positive());
  cmd->add_option("--until", args->until,
                  "stop after this step (the learning-rate schedule still spans train.steps)")
      ->check(Positive());
  cmd->add_option("--threads", args->threads, "CPU threads (overrides train.threads; 0 = all)")
      ->check(NonNegative());
  cmd->add_option("--resume", args->resume,
                  "checkpoint to start from when the run has none of its own: a run's ckpt/ "
                  "directory or one step-N directory in it (any world size or ZeRO stage)")
      ->check(ExistingDirectory());
  cmd->add_flag("--allow-schedule-change", args->allow_schedule_change,
                "resume a checkpoint written under another schedule (train.steps, learning "
                "rates, warm-up, tokens per step): the steps after it follow the new one");
  cmd->add_option("--out", args->out, "output directory (default runs/<job name>)");
  cmd->add_option("--peak-gflops", args->peak_gflops,
                  "MFU denominator (default: measure sgemm on the model's shapes)")
      ->check(Positive());
  return [args] { return RunTrain(*args); };
}

}  // namespace fmstack::cli
