#include "train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "util/error.h"

namespace fmstack::train {

Trainer::Trainer(const TrainConfig& config, const TokenFile& data)
    : config_(config),
      model_(gpt::CreateModel(config.shape, {.backend = config.backend,
                                             .max_batch = config.micro_batch,
                                             .max_seq = config.shape.seq_len})),
      optimizer_(config.optim, model_->params_layout()),
      sampler_(data, config.micro_batch, config.shape.seq_len, config.seed),
      inputs_(config.micro_batch * config.shape.seq_len),
      targets_(config.micro_batch * config.shape.seq_len) {
  if (data.vocab > config.shape.vocab) {
    throw Error(fmt::format("{}: tokenized with vocabulary {}, larger than the model's {}",
                            data.path, data.vocab, config.shape.vocab));
  }
  gpt::InitParams(model_->params_layout(), model_->params(), config.seed);
  counters_.seed = config.seed;
  counters_.rng = config.seed;
}

StepStats Trainer::Step() {
  const auto start = std::chrono::steady_clock::now();
  const int64_t B = config_.micro_batch, T = config_.shape.seq_len;
  const auto scale = 1.0f / static_cast<float>(config_.grad_accum);
  model_->ZeroGrad();
  double loss = 0;
  for (int64_t micro = 0; micro < config_.grad_accum; ++micro) {
    sampler_.Train(counters_.step, micro, /*rank=*/0, inputs_, targets_);
    loss += model_->Forward(inputs_, targets_, B, T);
    model_->Backward(scale);
  }
  loss /= static_cast<double>(config_.grad_accum);
  if (!std::isfinite(loss)) {
    throw Error(
        fmt::format("step {}: loss is {} — training diverged (lower optim.lr or "
                    "raise optim.warmup_steps)",
                    counters_.step + 1, loss));
  }
  StepStats s;
  s.grad_norm = GlobalNorm(model_->grads());
  ClipByGlobalNorm(model_->grads(), s.grad_norm, config_.optim.grad_clip);
  s.lr = LearningRate(config_.optim, counters_.step, config_.steps);
  optimizer_.Update(model_->params(), model_->grads(), counters_.step + 1, s.lr);
  ++counters_.step;
  counters_.tokens += config_.tokens_per_step();
  s.step = counters_.step;
  s.loss = loss;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

double Trainer::Evaluate(const TokenFile& data, int64_t batches) {
  const int64_t B = config_.micro_batch, T = config_.shape.seq_len;
  const BatchSampler eval(data, B, T, config_.seed);
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) {
    eval.Eval(i, batches, inputs_, targets_);
    sum += model_->Forward(inputs_, targets_, B, T);
  }
  return sum / static_cast<double>(batches);
}

TrainState Trainer::state() {
  return TrainState{model_->params(), optimizer_.m(), optimizer_.v(), counters_};
}

void Trainer::Save(const std::string& path, const std::string& data_dir) {
  SaveTrainState(path, config_.shape, state(), data_dir);
}

void Trainer::Load(const std::string& path) {
  TrainState s = state();
  const TrainStateHeader h = LoadTrainState(path, config_.shape, s);
  if (h.counters.seed != config_.seed) {
    throw Error(
        fmt::format("{}: saved with seed {}, the job has seed {}: the data order would "
                    "differ from the run being resumed",
                    path, h.counters.seed, config_.seed));
  }
  counters_ = s.counters;
}

}  // namespace fmstack::train
