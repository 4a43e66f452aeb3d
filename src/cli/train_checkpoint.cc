#include "cli/train_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string_view>
#include <utility>

#include "catalog/catalog.h"
#include "cli/commands.h"
#include "gpt/sgemm_peak.h"
#include "resilience/job_model.h"
#include "resilience/policy.h"
#include "train/checkpoint.h"
#include "util/error.h"
#include "util/units.h"

namespace fmstack::cli {

TrainCheckpointer::TrainCheckpointer(const spec::JobSpec& job, const catalog::Catalog& catalog,
                                     const std::string& out, train::Trainer& trainer, Note note,
                                     bool joining)
    : job_(job), out_(out), catalog_(catalog), trainer_(trainer), note_(std::move(note)) {
  engine_ = MakeEngine(!joining);
  trainer_.set_before_state_change([this] { ReleaseState(); });
  // The pool is touched (and pinned) now, so that no save, the first
  // included, pays page faults; not by a joining rank, whose peers wait for it.
  if (joining) return;
  const ckpt::Snapshot snap = train::CheckpointSnapshot(trainer);
  int64_t bytes = 0;
  for (const ckpt::TensorSlice& s : snap.slices) bytes += static_cast<int64_t>(s.data.size());
  engine_->Reserve(bytes, snap.device);  // and pinned, for a state in device memory
}

TrainCheckpointer::~TrainCheckpointer() {
  trainer_.set_before_state_change(nullptr);
}

void TrainCheckpointer::ReleaseState() {
  try {
    last_release_ = engine_->Release();
    release_in_step_ += last_release_;
  } catch (const std::exception& e) {
    throw CheckpointFailed(e.what());
  }
}

std::unique_ptr<ckpt::Engine> TrainCheckpointer::MakeEngine(bool collect_garbage) {
  ckpt::EngineOptions o;
  o.collect_garbage = collect_garbage;
  o.owner = CheckpointOwner(job_.name, out_);  // one job per checkpoint directory
  o.rank = trainer_.rank();
  o.world = trainer_.world();
  o.keep = static_cast<int>(job_.checkpoint.keep);
  o.pool_bytes = static_cast<int64_t>(job_.checkpoint.pool_bytes);
  o.write_timeout_seconds = job_.checkpoint.write_timeout;
  // The rank's compute threads are what sits idle while it waits for the copy
  // (under `fmstack run`, its share of the node's cores).
  o.copy_threads = ckpt::CopyThreadsFor(gpt::CpuThreads());
  if (o.rank == 0) o.log = note_;
  o.on_committed = [this](int64_t step, const std::string& tier, double seconds) {
    if (on_committed_) on_committed_(step, tier, seconds);
  };
  o.fault_point = [this](std::string_view point, const std::string& tier) {
    if (point != "shard-written" || tier != "local") return;
    if (die_during_save_.exchange(false)) ::raise(SIGKILL);
    if (fail_next_write_.exchange(false))
      throw Error("write: No space left on device (injected disk-full)");
  };
  return std::make_unique<ckpt::Engine>(MakeCheckpointTiers(job_.checkpoint, out_ + "/ckpt"), o);
}

void TrainCheckpointer::Reshaped() {
  ReleaseState();  // the trainer did when it reshaped; the engine goes now
  engine_->Abandon();
  engine_.reset();  // its threads end; what it wrote of an unfinished step stays uncommitted
  // Every rank is done with the old engine before rank 0 of the new world
  // removes uncommitted steps: none writes into them any more.
  const GroupSaves g = AgreeOnSaves();
  engine_ = MakeEngine(/*collect_garbage=*/true);
  every_ = g.every;
  // Every rank skips the same steps, or a save would wait for a part that
  // never comes.
  saved_through_ = std::max(g.newest_saved, trainer_.step());
  // Rank 0's clean-up is done before any rank can write the next step: that
  // step's collectives wait for rank 0.
}

std::optional<int64_t> TrainCheckpointer::Resume(std::optional<int64_t> max_step,
                                                 const std::string& from) {
  ReleaseState();  // the targets are the state
  const std::vector<ckpt::TensorTarget> targets = train::CheckpointTargets(trainer_);
  std::function<std::optional<ckpt::RestoreResult>(std::optional<int64_t>)> restore;
  ckpt::CheckpointDir dir;
  bool committed = false;
  if (from.empty()) {
    // A restore that rejects every copy may have written part of one into
    // the model first; then starting over would start from a mix.
    committed = engine_->Latest().has_value();
    restore = [&](std::optional<int64_t> limit) { return engine_->Restore(targets, limit); };
  } else {
    dir = ckpt::OpenCheckpointDir(from);
    if (dir.step) max_step = max_step ? std::min(*max_step, *dir.step) : *dir.step;
    committed = true;  // nothing there is an error, not a fresh start
    restore = [&](std::optional<int64_t> limit) {
      ckpt::Tier* tier = dir.tier.get();
      return ckpt::Restore(std::span(&tier, 1), targets, note_, limit);
    };
  }
  std::optional<ckpt::RestoreResult> r = restore(max_step);
  // Ranks read different shards, so one may reject a copy another loaded:
  // all go back to the oldest step any rank got. Every rank takes part in
  // every round, including one that already holds the agreed step: a rank
  // that left early would meet the others' next round with its training
  // collectives (the mismatch once read a peer's buffer out of bounds).
  for (;;) {
    const std::vector<double> steps = trainer_.AllValues(r ? static_cast<double>(r->step) : -1);
    const double agreed = *std::min_element(steps.begin(), steps.end());
    if (agreed < 0) {
      const double best = *std::max_element(steps.begin(), steps.end());
      if (!committed && best < 0) return std::nullopt;  // a fresh run
      if (!from.empty() && best < 0)
        throw Error(fmt::format("{}: no committed checkpoint{} that every rank could read", from,
                                max_step ? fmt::format(" at or before step {}", *max_step) : ""));
      throw Error(fmt::format(
          "checkpoint: rank {} found no usable checkpoint ({}), so the ranks cannot resume from "
          "one state and the model may hold part of a rejected copy; see the rejected copies "
          "above (`fmstack ckpt verify`), remove them or train into a new --out",
          static_cast<int>(std::min_element(steps.begin(), steps.end()) - steps.begin()),
          best >= 0 ? fmt::format("another rank restored step {}", best)
                    : "every committed copy was rejected"));
    }
    if (std::all_of(steps.begin(), steps.end(), [&](double s) { return s == agreed; })) break;
    if (static_cast<double>(r->step) != agreed) r = restore(static_cast<int64_t>(agreed));
  }
  train::FinishRestore(trainer_, *r);
  restore_seconds_ = r->seconds;
  if (trainer_.rank() == 0) {
    note_(fmt::format(
        "checkpoint: resumed from {} on the {} tier ({} read in {:.2f} s{})",
        ckpt::StepDirName(r->step), r->tier_name,
        units::FormatBytes(static_cast<double>(r->bytes_read)), r->seconds,
        r->rejected.empty() ? "" : fmt::format(", {} copies rejected", r->rejected.size())));
    const std::string change = train::ScheduleChange(trainer_.config(), r->manifest);
    if (!change.empty()) {
      note_(
          fmt::format("checkpoint: the schedule differs from the run that wrote {} ({}): the "
                      "steps after it follow the new one",
                      ckpt::StepDirName(r->step), change));
    }
  }
  return r->step;
}

double TrainCheckpointer::Mtti(std::string* source) const {
  // The same fault rates and rule that `fmstack sim` and `plan` use for this file.
  const resilience::FaultLoad load = resilience::ResolveFaultLoad(job_, catalog_);
  *source = load.source;
  return load.mtti;
}

void TrainCheckpointer::ChooseCadence(double blocking_seconds) {
  // Every rank must save at the same steps: decide from values all ranks share.
  const std::vector<double> step_s =
      trainer_.AllValues(step_seconds_sum_ / static_cast<double>(steps_seen_));
  const std::vector<double> blocking = trainer_.AllValues(blocking_seconds);
  const double step = *std::max_element(step_s.begin(), step_s.end());
  const double block = *std::max_element(blocking.begin(), blocking.end());
  double interval = job_.checkpoint.interval_seconds;
  std::string why = "checkpoint.interval";
  if (job_.checkpoint.every_steps > 0) {
    interval = static_cast<double>(job_.checkpoint.every_steps) * step;
    why = "checkpoint.every";
  } else if (job_.checkpoint.interval_auto) {
    std::string source;
    const double mtti = Mtti(&source);
    interval = resilience::CheckpointInterval(block, mtti, 0);
    if (interval <= 0) interval = 3600;  // nothing fails: an hourly safety net
    why = fmt::format("auto: Daly, sqrt(2 x {:.3f} s blocking x {} MTTI from {}) to higher order",
                      block, units::FormatSeconds(mtti), source);
  }
  every_ = job_.checkpoint.every_steps > 0
               ? job_.checkpoint.every_steps
               : std::max<int64_t>(1, std::llround(interval / std::max(step, 1e-9)));
  // Once per run: a restarted worker chooses the same cadence again.
  const char* restarts = std::getenv("FMSTACK_RESTART_COUNT");
  const bool first_attempt = restarts == nullptr || std::string_view(restarts) == "0";
  if (trainer_.rank() == 0 && first_attempt) {
    note_(fmt::format("checkpoint: every {} steps = {} ({}; {:.3f} s per step)", every_,
                      units::FormatSeconds(static_cast<double>(every_) * step), why, step));
  }
}

ckpt::SaveTiming TrainCheckpointer::Save() {
  ckpt::SaveTiming t;
  ckpt::Snapshot snap = train::CheckpointSnapshot(trainer_);
  snap.live = true;  // released by the trainer before its next optimizer step
  // Where the tokenizer of these weights lives, for `fmstack generate`.
  snap.model["data_dir"] = std::filesystem::absolute(job_.data.dir).lexically_normal().string();
  try {
    t = engine_->Save(snap);
  } catch (const std::exception& e) {
    throw CheckpointFailed(e.what());
  }
  saved_through_ = trainer_.step();
  if (every_ == 0) {
    // A live save costs training its release too, in the next step.
    first_blocking_ = t.blocking_seconds;
    cadence_due_ = true;
  }
  return t;
}

ckpt::SaveTiming TrainCheckpointer::SaveNow() {
  return Save();
}

std::optional<ckpt::SaveTiming> TrainCheckpointer::AfterStep(double step_seconds,
                                                             int64_t last_step) {
  step_seconds_sum_ += step_seconds;
  ++steps_seen_;
  if (std::exchange(cadence_due_, false)) ChooseCadence(first_blocking_ + last_release_);
  const int64_t step = trainer_.step();
  // The first step saves to measure the blocking time the interval needs;
  // a fixed interval needs a step time first.
  if (every_ == 0 && (!job_.checkpoint.interval_auto || job_.checkpoint.every_steps > 0))
    ChooseCadence(0);
  if (step <= saved_through_) return std::nullopt;  // saved before a peer recovery went back
  if (every_ == 0 || step % every_ == 0 || step == last_step) return Save();
  return std::nullopt;
}

TrainCheckpointer::GroupSaves TrainCheckpointer::AgreeOnSaves() {
  const std::vector<double> every = trainer_.AllValues(static_cast<double>(every_));
  const std::vector<double> saved = trainer_.AllValues(static_cast<double>(saved_through_));
  return {static_cast<int64_t>(*std::max_element(every.begin(), every.end())),
          static_cast<int64_t>(*std::max_element(saved.begin(), saved.end()))};
}

void TrainCheckpointer::Rejoined() {
  const GroupSaves g = AgreeOnSaves();
  every_ = g.every;
  if (saved_through_ < g.newest_saved && trainer_.step() == g.newest_saved && every_ > 0) Save();
}

void TrainCheckpointer::Finish() {
  std::vector<std::string> problems;
  try {
    problems = engine_->Wait(job_.checkpoint.drain_timeout);
  } catch (const std::exception& e) {
    throw CheckpointFailed(e.what());
  }
  // The fast tier holds the step: the slower ones are warned about, once.
  for (const std::string& p : problems) note_("warning: " + p);
}

}  // namespace fmstack::cli
