#include "train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>

#include "util/error.h"

namespace fmstack::train {

Trainer::Trainer(const TrainConfig& config, const TokenFile& data, comm::Communicator* comm,
                 DpConfig dp)
    : config_(config),
      model_(gpt::CreateModel(config.shape, {.backend = config.backend,
                                             .device = config.device_index,
                                             .matmul = config.matmul,
                                             .max_batch = config.micro_batch,
                                             .max_seq = config.shape.seq_len})),
      sampler_(data, config.micro_batch, config.shape.seq_len, config.seed),
      inputs_(config.micro_batch * config.shape.seq_len),
      targets_(config.micro_batch * config.shape.seq_len) {
  if (data.vocab > config.shape.vocab) {
    throw Error(fmt::format("{}: tokenized with vocabulary {}, larger than the model's {}",
                            data.path, data.vocab, config.shape.vocab));
  }
  dp_config_ = dp;
  groups_ = static_cast<int>(model_->params_layout().GradReadyGroups().size());
  if (comm != nullptr && comm->size() > 1) {
    if (config.grad_accum % comm->size() != 0 && !config.uneven_split) {
      throw Error(
          fmt::format("train.global_batch: {} micro-batches of {} per step do not split "
                      "evenly over {} data-parallel ranks",
                      config.grad_accum, config.micro_batch, comm->size()));
    }
    CheckShare(comm->size());
    dp_ = std::make_unique<DataParallel>(*comm, model_->params_layout(), config.optim, dp);
    dp_world_ = comm->size();
  }
  if (!dp_ || !dp_->sharded()) {
    optimizer_ = std::make_unique<AdamW>(config.optim, model_->params_layout());
  }
  // Every rank initialises from the same seed, so the replicas start equal
  // without a broadcast.
  if (config.init_params) gpt::InitParams(model_->params_layout(), model_->params(), config.seed);
  // One process on a GPU: AdamW runs where the parameters live (data
  // parallelism reduces host gradients, so it keeps the host optimizer).
  if (!dp_ && optimizer_ && config.backend != "cpu") {
    const OptimConfig& o = config.optim;
    // A byte per parameter, for as long as the call copies it to the device
    // (never on the CPU, where it would add to the peak).
    const std::vector<uint8_t> decay_mask = DecayMask(model_->params_layout());
    optimizer_on_device_ = model_->EnableDeviceOptimizer({.beta1 = o.beta1,
                                                          .beta2 = o.beta2,
                                                          .eps = o.eps,
                                                          .weight_decay = o.weight_decay,
                                                          .grad_clip = o.grad_clip,
                                                          .decay_mask = decay_mask});
  }
  counters_.seed = config.seed;
  counters_.rng = config.seed;
}

StepStats Trainer::Step() {
  const auto start = std::chrono::steady_clock::now();
  const int64_t B = config_.micro_batch, T = config_.shape.seq_len, G = config_.grad_accum;
  const comm::Range mine = MicroBatches();
  const auto local = static_cast<int64_t>(mine.count), first = static_cast<int64_t>(mine.begin);
  // ZeRO-2 reduces every micro-batch: a rank with a smaller share (after an
  // elastic shrink to a world that does not divide the batch) still meets
  // its peers in each reduction, with zero gradients.
  const bool zero2 = dp_ && dp_config_.mode == DpMode::kZero2;
  const int64_t rounds = zero2 ? (G + world() - 1) / world() : std::max<int64_t>(local, 1);
  const auto scale = 1.0f / static_cast<float>(G);
  model_->ZeroGrad();
  if (slowdown_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(slowdown_));
  if (std::exchange(poison_, false)) model_->PoisonGradient();
  double loss = 0;
  for (int64_t j = 0; j < rounds; ++j) {
    const bool last = j == rounds - 1;
    auto hook = dp_ ? dp_->BackwardHook(model_->grads(), last) : nullptr;
    if (j < local) {
      sampler_.Train(counters_.step, first + j, /*rank=*/0, inputs_, targets_);
      loss += model_->Forward(inputs_, targets_, B, T);
      model_->Backward(scale, hook);
    } else if (hook) {
      for (int g = 0; g < groups_; ++g) hook(g);  // the gradients are zero
    }
    if (dp_) dp_->AfterBackward(model_->grads(), last);
  }
  if (dp_) loss = dp_->SumAcrossRanks(loss);
  loss /= static_cast<double>(G);
  if (!std::isfinite(loss)) {
    throw NonFiniteError(fmt::format("step {}: loss is {} — training diverged (lower optim.lr or "
                                     "raise optim.warmup_steps)",
                                     counters_.step + 1, loss),
                         counters_.step + 1);
  }
  // Forward and backward are done: what reads the state (a checkpoint
  // written from it) has had the whole passes, and must let go now.
  BeforeStateChange();
  StepStats s;
  s.lr = LearningRate(config_.optim, counters_.step, config_.steps);
  if (dp_) {
    s.grad_norm =
        dp_->Step(model_->params(), model_->grads(), optimizer_.get(), counters_.step + 1, s.lr);
    s.comm = dp_->TakeTimes();
  } else if (optimizer_on_device_) {
    s.grad_norm = model_->DeviceOptimizerStep(counters_.step + 1, s.lr);
  } else {
    s.grad_norm = GlobalNorm(model_->grads());
    optimizer_->Update(model_->params(), model_->grads(), counters_.step + 1, s.lr,
                       ClipScale(s.grad_norm, config_.optim.grad_clip));
  }
  if (!std::isfinite(s.grad_norm)) {
    // Every rank sees the same global norm, so all stop at this step together.
    throw NonFiniteError(fmt::format("step {}: gradient norm is {} (loss {:.4f})",
                                     counters_.step + 1, s.grad_norm, loss),
                         counters_.step + 1);
  }
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

std::vector<Trainer::MomentRun> Trainer::MomentRuns() {
  if (optimizer_) return {{0, optimizer_->m(), optimizer_->v()}};
  std::vector<MomentRun> runs;
  for (const DataParallel::OwnedSpan& s : dp_->OwnedSpans()) {
    runs.push_back({s.flat, dp_->shard_m().subspan(s.shard, s.count),
                    dp_->shard_v().subspan(s.shard, s.count)});
  }
  return runs;
}

void Trainer::Detach() {
  BeforeStateChange();  // the moments of a ZeRO shard go with dp_
  if (!dp_) return;
  dp_->comm().Abort("the trainer left this group");  // an operation in flight fails now
  dp_.reset();
}

void Trainer::Attach(comm::Communicator* comm) {
  BeforeStateChange();
  if (comm == nullptr || comm->size() != dp_world_) {
    throw Error(fmt::format("rejoin: a communicator of {} ranks for a trainer built for {}",
                            comm ? comm->size() : 0, dp_world_));
  }
  dp_ = std::make_unique<DataParallel>(*comm, model_->params_layout(), config_.optim, dp_config_);
}

void Trainer::Reshape(comm::Communicator* comm) {
  BeforeStateChange();
  if (comm == nullptr || comm->size() < 2)
    throw Error("reshape: data parallelism needs a communicator of at least 2 ranks");
  CheckShare(comm->size());
  dp_ = std::make_unique<DataParallel>(*comm, model_->params_layout(), config_.optim, dp_config_);
  dp_world_ = comm->size();
}

void Trainer::CheckShare(int world) const {
  if (config_.grad_accum < world) {
    throw Error(fmt::format(
        "train.global_batch: {} micro-batches per step cannot keep {} data-parallel ranks busy",
        config_.grad_accum, world));
  }
}

comm::Range Trainer::MicroBatches() const {
  return comm::ShardOf(static_cast<size_t>(config_.grad_accum), world(), rank());
}

std::vector<comm::Range> Trainer::StateRunsOf(int world, int rank) const {
  if (dp_config_.mode == DpMode::kDdp || world < 2) return {{0, model_->params().size()}};
  return DataParallel::OwnedRangesOf(model_->params_layout(), dp_config_, world, rank);
}

std::vector<uint64_t> Trainer::AllWords(std::span<const uint64_t> mine) {
  if (!dp_) return {mine.begin(), mine.end()};
  return dp_->AllWords(mine);
}

void Trainer::SyncHostState() {
  if (optimizer_on_device_) model_->SyncToHost(optimizer_->m(), optimizer_->v());
}

void Trainer::HostStateChanged() {
  if (optimizer_on_device_) model_->SyncToDevice(optimizer_->m(), optimizer_->v());
}

void Trainer::FlipParameterBit(size_t index, int bit) {
  BeforeStateChange();
  SyncHostState();
  std::span<float> p = model_->params();
  uint32_t word;
  std::memcpy(&word, &p[index % p.size()], sizeof word);
  word ^= 1u << (bit & 31);
  std::memcpy(&p[index % p.size()], &word, sizeof word);
  HostStateChanged();
}

std::vector<double> Trainer::AllValues(double x) {
  if (!dp_) return {x};
  return dp_->AllValues(x);
}

}  // namespace fmstack::train
