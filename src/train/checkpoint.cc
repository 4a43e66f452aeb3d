#include "train/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>

#include "gpt/layout.h"
#include "util/error.h"

namespace fmstack::train {
namespace {

std::span<std::byte> Bytes(std::span<float> f) {
  return std::as_writable_bytes(f);
}

// Calls fn(tensor, begin, span) for the parts of `run` (a run of the flat
// parameter vector starting at `flat`) that fall inside each tensor.
template <typename T, typename Fn>
void SplitByTensor(const std::vector<gpt::TensorInfo>& tensors, size_t flat, std::span<T> run,
                   Fn&& fn) {
  for (const gpt::TensorInfo& t : tensors) {
    const size_t lo = std::max(flat, static_cast<size_t>(t.offset));
    const size_t hi = std::min(flat + run.size(), static_cast<size_t>(t.offset + t.size()));
    if (hi > lo) fn(t, static_cast<int64_t>(lo) - t.offset, run.subspan(lo - flat, hi - lo));
  }
}

// The trainer's state in device memory, copied by the model into the
// engine's staging pool, which this pins: no host copy of the state is made.
class ModelDeviceSource final : public ckpt::DeviceSource {
 public:
  explicit ModelDeviceSource(gpt::Model& model) : model_(model) {}
  void Pin(std::span<char> host) override { gpt::PinHostMemory(host); }
  void Unpin(std::span<char> host) noexcept override { gpt::UnpinHostMemory(host); }
  // Called only by Engine::Save with this snapshot, while the model lives.
  void CopyToHost(std::span<const Copy> copies) override {
    std::vector<gpt::Model::DeviceCopy> c;
    c.reserve(copies.size());
    for (const Copy& x : copies) c.push_back({x.to, x.from, x.bytes});
    model_.CopyFromDevice(c);
  }

 private:
  gpt::Model& model_;
};

struct ConstMomentRun {
  size_t flat = 0;
  std::span<const float> m, v;
};

// What sets the learning rate and batch of each step: a resume with other
// values trains the remaining steps on another schedule.
nlohmann::json ScheduleJson(const TrainConfig& c) {
  return {{"train.steps", c.steps},
          {"optim.lr", c.optim.lr},
          {"optim.min_lr", c.optim.min_lr},
          {"optim.warmup_steps", c.optim.warmup_steps},
          {"tokens per step", c.tokens_per_step()}};
}

}  // namespace

ckpt::Snapshot CheckpointSnapshot(Trainer& trainer) {
  // With the optimizer on the device, the state is read where it is true:
  // the host's copies are stale and refreshing them would copy it twice.
  const gpt::Model::DeviceState device =
      trainer.optimizer_on_device() ? trainer.model().device_state() : gpt::Model::DeviceState{};
  const bool on_device = !device.params.empty();
  std::span<const float> params = device.params;
  std::vector<ConstMomentRun> moments;
  if (on_device) {
    moments.push_back({0, device.m, device.v});
  } else {
    trainer.SyncHostState();
    params = trainer.model().params();
    for (const Trainer::MomentRun& run : trainer.MomentRuns())
      moments.push_back({run.flat, run.m, run.v});
  }
  const gpt::ParamLayout layout = gpt::ParamLayout::For(trainer.config().shape);
  const std::vector<gpt::TensorInfo> tensors = layout.Tensors();
  const int rank = trainer.rank(), world = trainer.world();
  ckpt::Snapshot s;
  const TrainCounters& c = trainer.counters();
  s.counters = {c.step, c.step, c.tokens, c.seed, c.rng};
  s.layout = {world, trainer.sharded() ? 1 : 0};
  s.model = ShapeJson(trainer.config().shape);
  s.model["schedule"] = ScheduleJson(trainer.config());
  if (on_device) s.device = std::make_shared<ModelDeviceSource>(trainer.model());
  auto add = [&](const std::string& name, const gpt::TensorInfo& t, int64_t begin,
                 std::span<const float> data) {
    s.slices.push_back(
        {name + t.name, ckpt::DType::kF32, t.dims, begin, std::as_bytes(data), on_device});
  };
  for (const gpt::TensorInfo& t : tensors) {
    const comm::Range share = comm::ShardOf(static_cast<size_t>(t.size()), world, rank);
    add("model.", t, static_cast<int64_t>(share.begin),
        params.subspan(static_cast<size_t>(t.offset) + share.begin, share.count));
  }
  for (const ConstMomentRun& run : moments) {
    for (auto [prefix, data] : {std::pair{"optim.exp_avg.", run.m}, {"optim.exp_avg_sq.", run.v}}) {
      // prefix by copy: clang before 16 cannot capture a structured binding.
      SplitByTensor(tensors, run.flat, data,
                    [&, prefix = prefix](const gpt::TensorInfo& t, int64_t begin,
                                         std::span<const float> part) {
                      if (trainer.sharded()) return add(prefix, t, begin, part);
                      // Replicated moments: this rank's even share only.
                      const comm::Range share =
                          comm::ShardOf(static_cast<size_t>(t.size()), world, rank);
                      add(prefix, t, static_cast<int64_t>(share.begin),
                          part.subspan(share.begin, share.count));
                    });
    }
  }
  return s;
}

std::vector<ckpt::TensorTarget> CheckpointTargets(Trainer& trainer) {
  const gpt::ParamLayout layout = gpt::ParamLayout::For(trainer.config().shape);
  const std::vector<gpt::TensorInfo> tensors = layout.Tensors();
  std::vector<ckpt::TensorTarget> targets;
  std::span<float> params = trainer.model().params();
  for (const gpt::TensorInfo& t : tensors) {
    targets.push_back(
        {"model." + t.name, ckpt::DType::kF32, 0,
         Bytes(params.subspan(static_cast<size_t>(t.offset), static_cast<size_t>(t.size())))});
  }
  for (const Trainer::MomentRun& run : trainer.MomentRuns()) {
    for (auto [prefix, data] : {std::pair{"optim.exp_avg.", run.m}, {"optim.exp_avg_sq.", run.v}}) {
      SplitByTensor(
          tensors, run.flat, data,
          [&, prefix = prefix](const gpt::TensorInfo& t, int64_t begin, std::span<float> part) {
            targets.push_back({prefix + t.name, ckpt::DType::kF32, begin, Bytes(part)});
          });
    }
  }
  return targets;
}

std::string ScheduleChange(const TrainConfig& config, const ckpt::Manifest& m) {
  if (!m.model.is_object() || !m.model.contains("schedule")) return "";  // an older checkpoint
  const nlohmann::json& was = m.model["schedule"];
  const nlohmann::json now = ScheduleJson(config);
  std::string out;
  for (const auto& [key, value] : now.items()) {
    if (!was.contains(key) || was[key] == value) continue;
    out +=
        fmt::format("{}{} {} -> {}", out.empty() ? "" : ", ", key, was[key].dump(), value.dump());
  }
  return out;
}

void FinishRestore(Trainer& trainer, const ckpt::RestoreResult& r) {
  const ckpt::Manifest& m = r.manifest;
  const nlohmann::json want = ShapeJson(trainer.config().shape);
  for (const char* key : {"layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len"}) {
    if (m.model.value(key, nlohmann::json()) != want[key]) {
      throw Error(fmt::format("checkpoint {} on {}: saved for model {}, the job trains {}",
                              ckpt::StepDirName(r.step), r.tier_name, m.model.dump(), want.dump()));
    }
  }
  if (m.counters.seed != trainer.config().seed) {
    throw Error(fmt::format(
        "checkpoint {} on {}: saved with seed {}, the job has seed {}: the data "
        "order would differ from the run being resumed",
        ckpt::StepDirName(r.step), r.tier_name, m.counters.seed, trainer.config().seed));
  }
  trainer.set_counters(
      {m.counters.step, m.counters.data_position, m.counters.seed, m.counters.rng});
  trainer.HostStateChanged();
}

}  // namespace fmstack::train
