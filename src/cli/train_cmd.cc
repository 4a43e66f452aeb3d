// `fmstack train job.toml`: the reference trainer on this machine's CPU.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/train_checkpoint.h"
#include "comm/hier_comm.h"
#include "gpt/sgemm_peak.h"
#include "spec/job_spec.h"
#include "train/corpus.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/text_table.h"
#include "util/units.h"

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
};

train::TrainConfig ConfigFromSpec(const spec::JobSpec& job, int64_t steps_override) {
  train::TrainConfig c;
  c.shape = job.model;
  c.backend = job.train.backend;
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

int RunTrain(const TrainArgs& args) {
  const catalog::Catalog catalog = catalog::Catalog::LoadEmbedded();
  const spec::JobSpec job = spec::LoadJobSpec(args.job, catalog);
  if (job.data.dir.empty()) {
    throw SpecError(job.PosOf("data"), "data.dir",
                    "not set: run `fmstack data prepare --out DIR` and set [data] dir = \"DIR\"");
  }
  // A worker started by `fmstack run` (or torchrun) trains data-parallel.
  const bool distributed = std::getenv("WORLD_SIZE") != nullptr;
  const bool worker = std::getenv("FMSTACK_RUN") != nullptr;
  int threads = args.threads >= 0 ? args.threads : static_cast<int>(job.train.threads);
  if (distributed && threads == 0 && std::getenv("OMP_NUM_THREADS") != nullptr) {
    threads = std::atoi(std::getenv("OMP_NUM_THREADS"));
  }
  gpt::SetCpuThreads(threads);
  const train::TrainConfig config = ConfigFromSpec(job, args.steps);
  const train::TokenFile train_tokens = train::TokenFile::Load(job.data.dir + "/train.bin");
  const train::TokenFile val_tokens = train::TokenFile::Load(job.data.dir + "/val.bin");
  std::unique_ptr<comm::Communicator> comm;
  if (distributed) comm = comm::Connect(comm::OptionsFromEnv());
  const train::DpConfig dp = DpFromSpec(job);
  train::Trainer trainer(config, train_tokens, comm.get(), dp);
  const bool lead = trainer.rank() == 0;
  const ProgressLine progress;
  const std::string out = args.out.empty() ? "runs/" + job.name : args.out;
  std::filesystem::create_directories(out);
  TrainCheckpointer checkpoints(job, catalog, out, trainer, [&](const std::string& line) {
    if (lead) progress.Note(line);
  });
  // An explicit train state wins; otherwise continue from the newest checkpoint.
  if (!args.resume.empty()) {
    trainer.Load(args.resume);
  } else {
    checkpoints.Resume();
  }

  const int64_t T = config.shape.seq_len;
  const double flops_per_token = workload::TrainingFlopsPerToken(config.shape).detailed;
  // Measuring sgemm while other ranks train would measure the contention.
  const double peak = args.peak_gflops > 0 ? args.peak_gflops
                      : distributed        ? 0
                                           : gpt::MeasureSgemmGflops(gpt::TrainingGemms(
                                                 config.micro_batch * T, config.shape.hidden,
                                                 config.shape.ffn_hidden, config.shape.vocab));
  const std::string state_path = out + "/state.bin";
  if (lead) {
    std::cerr << fmt::format(
        "training {} ({} params) on {} x {} threads ({}): {} steps x {} tokens, from step {}\n",
        config.shape.name, units::FormatCount(static_cast<double>(trainer.model().params().size())),
        trainer.world(), gpt::CpuThreads(),
        comm ? fmt::format("{} over {}", train::DpModeName(dp.mode), comm->name()) : "1 process",
        config.steps, config.tokens_per_step(), trainer.step());
  }

  const double unigram = train::UnigramEntropy(train_tokens.tokens, train_tokens.vocab);
  double seconds = 0, last_loss = 0, val_loss = 0, comm_exposed = 0;
  const int64_t first = trainer.step();
  const int64_t last = args.until > 0 ? std::min(args.until, config.steps) : config.steps;
  while (trainer.step() < last) {
    const train::StepStats s = trainer.Step();
    seconds += s.seconds;
    comm_exposed += s.comm.exposed;
    last_loss = s.loss;
    checkpoints.AfterStep(s.seconds, last);
    const double tok_s = static_cast<double>((s.step - first) * config.tokens_per_step()) / seconds;
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
                 {"tokens", config.tokens_per_step()}});
    } else if (lead)
      progress.Show(
          s.step, config.steps,
          fmt::format("step {}/{} | loss {:.4f} | lr {:.2e} | |g| {:.2f} | {:.0f} tok/s | "
                      "MFU {:.0f}% | ETA {}",
                      s.step, config.steps, s.loss, s.lr, s.grad_norm, tok_s, 100 * mfu,
                      units::FormatSeconds(static_cast<double>(config.steps - s.step) * seconds /
                                           static_cast<double>(s.step - first))));
    const int64_t every = job.train.eval_interval;
    if ((every > 0 && s.step % every == 0) || s.step == last) {
      trainer.Save(state_path, job.data.dir);  // collective under ZeRO
      if (!lead) continue;
      val_loss = trainer.Evaluate(val_tokens, job.train.eval_batches);
      if (worker) {
        EmitEvent({{"ev", "eval"},
                   {"step", s.step},
                   {"loss", s.loss},
                   {"val_loss", val_loss},
                   {"unigram", unigram},
                   {"state", state_path}});
      } else {
        progress.Note(
            fmt::format("step {}: train loss {:.4f}, held-out loss {:.4f} (unigram {:.3f})", s.step,
                        s.loss, val_loss, unigram));
      }
    }
  }
  checkpoints.Finish();
  if (!lead) return 0;
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
               {"state", state_path},
               {"world", trainer.world()},
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
  t.AddRow({"state", state_path});
  std::cout << t.RenderText();
  return 0;
}

}  // namespace

Runner AddTrainCommand(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "train the job's GPT model on this machine's CPU");
  cmd->add_option("job", args->job, "job spec (TOML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--steps", args->steps, "optimizer steps (overrides train.steps)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--until", args->until,
                  "stop after this step (the learning-rate schedule still spans train.steps)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", args->threads, "CPU threads (overrides train.threads; 0 = all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--resume", args->resume, "train state file to continue from")
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", args->out, "output directory (default runs/<job name>)");
  cmd->add_option("--peak-gflops", args->peak_gflops,
                  "MFU denominator (default: measure sgemm on the model's shapes)")
      ->check(CLI::PositiveNumber);
  return [args] { return RunTrain(*args); };
}

}  // namespace fmstack::cli
