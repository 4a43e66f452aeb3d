// train: the training loop. One Step() is one optimizer step: grad_accum
// micro-batches of B x T tokens forward and backward, global-norm clipping,
// then AdamW at the scheduled learning rate. Everything is a pure function of
// (config, data, step), so two runs with the same seed and thread count are
// bitwise identical, and a resumed run equals an uninterrupted one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "gpt/model.h"
#include "train/data_parallel.h"
#include "train/optimizer.h"
#include "train/token_file.h"
#include "train/train_state.h"
#include "util/error.h"
#include "workload/shape.h"

namespace fmstack::train {

struct TrainConfig {
  workload::TransformerShape shape;
  std::string backend = "cpu";  // gpt::ModelOptions::backend: "cpu" or "cuda"
  int device_index = 0;
  gpt::Matmul matmul = gpt::Matmul::kFp32;
  int64_t micro_batch = 4;  // B
  int64_t grad_accum = 1;   // micro-batches per optimizer step, over all ranks together
  int64_t steps = 100;      // optimizer steps in the whole run
  uint64_t seed = 1337;
  OptimConfig optim;
  // false: the parameters are left for the caller to restore (a rank that
  // replaces a lost one gets them from its peers; drawing them is waste).
  bool init_params = true;
  // An elastic job may run on a world that does not divide grad_accum (the
  // global batch is kept, some ranks run one micro-batch fewer).
  bool uneven_split = false;

  int64_t tokens_per_step() const { return micro_batch * grad_accum * shape.seq_len; }
};

struct StepStats {
  int64_t step = 0;      // the step just completed, 1-based
  double loss = 0;       // mean over the step's micro-batches
  double grad_norm = 0;  // before clipping
  double lr = 0;
  double seconds = 0;  // wall time of the step
  CommTimes comm;      // data parallel only
};

// The loss or the gradient norm is NaN or infinite: the step was not applied.
class NonFiniteError : public Error {
 public:
  NonFiniteError(const std::string& message, int64_t step) : Error(message), step_(step) {}
  int64_t step() const { return step_; }

 private:
  int64_t step_;
};

class Trainer {
 public:
  // `data` must outlive the trainer. Initialises parameters from the seed.
  // With a communicator of W ranks (which must outlive the trainer), rank r
  // runs micro-batches r*G/W .. (r+1)*G/W-1 of the G = grad_accum of every
  // step, so W ranks train exactly the batches one process would (after an
  // elastic reshape W need not divide G: comm::ShardOf splits it).
  Trainer(const TrainConfig& config, const TokenFile& data, comm::Communicator* comm = nullptr,
          DpConfig dp = {});

  StepStats Step();
  // Mean loss over `batches` fixed evaluation batches of `data`.
  double Evaluate(const TokenFile& data, int64_t batches);

  int64_t step() const { return counters_.step; }
  const TrainConfig& config() const { return config_; }
  gpt::Model& model() { return *model_; }
  const gpt::Model& model() const { return *model_; }
  int rank() const { return dp_ ? dp_->comm().rank() : 0; }
  int world() const { return dp_ ? dp_->comm().size() : 1; }
  uint64_t ParamHash() {
    SyncHostState();
    return HashFloats(model_->params());
  }

  // With the optimizer on the model's device (CUDA, one process), the host
  // copies of parameters and moments go stale between steps: SyncHostState
  // refreshes them before anything reads them (checkpoint snapshots, hashes),
  // HostStateChanged pushes them back after anything writes them (restores).
  // Both do nothing otherwise.
  void SyncHostState();
  void HostStateChanged();
  bool optimizer_on_device() const { return optimizer_on_device_; }

  // For the checkpoint engine (train/checkpoint.h): the moments this rank
  // holds, as runs of the flat parameter vector. Single process and DDP: one
  // run over everything; ZeRO: the rank's shard.
  struct MomentRun {
    size_t flat = 0;
    std::span<float> m, v;
  };
  std::vector<MomentRun> MomentRuns();
  bool sharded() const { return dp_ && dp_->sharded(); }
  const TrainCounters& counters() const { return counters_; }
  void set_counters(const TrainCounters& c) { counters_ = c; }
  // Every rank's x, in rank order (collective): for decisions all ranks
  // must share, such as the checkpoint cadence and the step to restore.
  std::vector<double> AllValues(double x);
  // Every rank's words, rank-major (collective): agreement on flags, hashes.
  std::vector<uint64_t> AllWords(std::span<const uint64_t> mine);

  // Checkpointless recovery: after a collective failed, the survivors drop
  // the broken communicator (Detach, before destroying it) and continue on
  // a new one of the same size (Attach). The ZeRO shards keep their layout,
  // so the moments must be restored after Attach (train/peer_replica.h).
  void Detach();
  void Attach(comm::Communicator* comm);
  // Elastic: the same after the world changed size. The new ranks' ZeRO
  // shards are empty until the state is restored (PeerReplicas::Reshape),
  // and the global batch is split anew (see MicroBatches).
  void Reshape(comm::Communicator* comm);
  comm::Communicator* communicator() { return dp_ ? &dp_->comm() : nullptr; }
  // The micro-batches of each step this rank runs: its share of the
  // grad_accum micro-batches of the global batch (comm::ShardOf).
  comm::Range MicroBatches() const;
  // The flat parameter ranges whose state rank `rank` of a group of `world`
  // holds (MomentRuns' ranges there): everything under DDP.
  std::vector<comm::Range> StateRunsOf(int world, int rank) const;
  const DpConfig& dp_config() const { return dp_config_; }
  // ZeRO: every rank's owned parameter runs (MomentRuns' ranges) into
  // everyone's replica (collective, exact). No-op otherwise.
  void GatherParams() {
    if (dp_) dp_->GatherParams(model_->params());
  }

  // Fault rehearsal (`fmstack fault inject`): a NaN in this rank's gradient
  // of the next step; one flipped bit in this rank's parameter replica; a
  // delay added to every step from now on (a slow node).
  void PoisonNextGradient() { poison_ = true; }

  // Called before the trainer changes its parameters or optimizer state, or
  // frees any of it: each optimizer step (after the forward and backward
  // passes), rejoins and reshapes (before a peer restore writes the state)
  // and bit flips. A checkpoint written straight from that memory
  // (ckpt::Snapshot::live) is released here; a checkpoint restore releases
  // through the engine (ckpt::Engine::Restore, TrainCheckpointer::Resume).
  void set_before_state_change(std::function<void()> fn) { before_state_change_ = std::move(fn); }
  void FlipParameterBit(size_t index, int bit);
  void SlowDown(double seconds_per_step) { slowdown_ = seconds_per_step; }

 private:
  void CheckShare(int world) const;
  void BeforeStateChange() {
    if (before_state_change_) before_state_change_();
  }

  TrainConfig config_;
  std::unique_ptr<gpt::Model> model_;
  int groups_ = 0;  // the model's gradient-ready groups (backward hook calls)
  std::unique_ptr<DataParallel> dp_;
  DpConfig dp_config_;
  int dp_world_ = 1;                  // the data-parallel width the trainer was built for
  std::unique_ptr<AdamW> optimizer_;  // replicated: single process and DDP
  BatchSampler sampler_;
  TrainCounters counters_;
  std::vector<int32_t> inputs_, targets_;
  bool poison_ = false;
  bool optimizer_on_device_ = false;
  double slowdown_ = 0;
  std::function<void()> before_state_change_;
};

}  // namespace fmstack::train
