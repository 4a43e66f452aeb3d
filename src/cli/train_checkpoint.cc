#include "cli/train_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "catalog/catalog.h"
#include "cli/commands.h"
#include "plan/sizing.h"
#include "train/checkpoint.h"
#include "util/error.h"
#include "util/units.h"

namespace fmstack::cli {

TrainCheckpointer::TrainCheckpointer(const spec::JobSpec& job, const catalog::Catalog& catalog,
                                     const std::string& out, train::Trainer& trainer, Note note)
    : job_(job), catalog_(catalog), trainer_(trainer), note_(std::move(note)) {
  ckpt::EngineOptions o;
  o.rank = trainer.rank();
  o.world = trainer.world();
  o.keep = static_cast<int>(job.checkpoint.keep);
  o.pool_bytes = static_cast<int64_t>(job.checkpoint.pool_bytes);
  if (o.rank == 0) o.log = note_;
  engine_ = std::make_unique<ckpt::Engine>(MakeCheckpointTiers(job.checkpoint, out + "/ckpt"), o);
  // The pool is touched now, so that no save, the first included, pays page faults.
  int64_t bytes = 0;
  for (const ckpt::TensorSlice& s : train::CheckpointSnapshot(trainer).slices)
    bytes += static_cast<int64_t>(s.data.size());
  engine_->Reserve(bytes);
}

std::optional<int64_t> TrainCheckpointer::Resume() {
  // A restore that rejects every copy may have written part of one into the
  // model first; then starting over would start from a mix, not from the seed.
  const bool committed = engine_->Latest().has_value();
  std::optional<int64_t> max_step;
  for (;;) {
    const std::vector<ckpt::TensorTarget> targets = train::CheckpointTargets(trainer_);
    const std::optional<ckpt::RestoreResult> r = engine_->Restore(targets, max_step);
    // Ranks read different shards, so one may reject a copy another loaded:
    // all go back to the oldest step any rank got.
    const std::vector<double> steps = trainer_.AllValues(r ? static_cast<double>(r->step) : -1);
    const double agreed = *std::min_element(steps.begin(), steps.end());
    if (agreed < 0) {
      const double best = *std::max_element(steps.begin(), steps.end());
      if (!committed && best < 0) return std::nullopt;  // a fresh run
      throw Error(fmt::format(
          "checkpoint: rank {} found no usable checkpoint ({}), so the ranks cannot resume from "
          "one state and the model may hold part of a rejected copy; see the rejected copies "
          "above (`fmstack ckpt verify`), remove them or train into a new --out",
          static_cast<int>(std::min_element(steps.begin(), steps.end()) - steps.begin()),
          best >= 0 ? fmt::format("another rank restored step {}", best)
                    : "every committed copy was rejected"));
    }
    if (r && static_cast<double>(r->step) == agreed) {
      train::FinishRestore(trainer_, *r);
      if (trainer_.rank() == 0) {
        note_(fmt::format(
            "checkpoint: resumed from {} on the {} tier ({} read in {:.2f} s{})",
            ckpt::StepDirName(r->step), r->tier_name,
            units::FormatBytes(static_cast<double>(r->bytes_read)), r->seconds,
            r->rejected.empty() ? "" : fmt::format(", {} copies rejected", r->rejected.size())));
      }
      return r->step;
    }
    max_step = static_cast<int64_t>(agreed);
  }
}

double TrainCheckpointer::Mtti(std::string* source) const {
  if (job_.cluster && job_.cluster->JobMtti() > 0) {
    *source = "the cluster's MTTI";
    return job_.cluster->JobMtti();
  }
  const catalog::FaultSet* set = catalog_.FindFaultSet("llama3-405b");
  const double nodes = job_.cluster ? static_cast<double>(job_.cluster->nodes) : 1;
  if (set == nullptr || set->UnplannedPerNodeHour() <= 0) {
    *source = "a default of 24 h";
    return 24 * 3600.0;
  }
  *source =
      fmt::format("the llama3-405b fault rates over {} node(s); set cluster.node_mtbf", nodes);
  return 3600.0 / (set->UnplannedPerNodeHour() * nodes);
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
    interval = plan::IntervalYoungDaly(block, mtti);
    why = fmt::format("auto: Young/Daly sqrt(2 x {:.3f} s blocking x {} MTTI from {})", block,
                      units::FormatSeconds(mtti), source);
  }
  every_ = job_.checkpoint.every_steps > 0
               ? job_.checkpoint.every_steps
               : std::max<int64_t>(1, std::llround(interval / std::max(step, 1e-9)));
  if (trainer_.rank() == 0) {
    note_(fmt::format("checkpoint: every {} steps = {} ({}; {:.3f} s per step)", every_,
                      units::FormatSeconds(static_cast<double>(every_) * step), why, step));
  }
}

void TrainCheckpointer::Save() {
  const ckpt::SaveTiming t = engine_->Save(train::CheckpointSnapshot(trainer_));
  if (every_ == 0) ChooseCadence(t.blocking_seconds);
}

void TrainCheckpointer::AfterStep(double step_seconds, int64_t last_step) {
  step_seconds_sum_ += step_seconds;
  ++steps_seen_;
  const int64_t step = trainer_.step();
  // The first step saves to measure the blocking time the interval needs;
  // a fixed interval needs a step time first.
  if (every_ == 0 && (!job_.checkpoint.interval_auto || job_.checkpoint.every_steps > 0))
    ChooseCadence(0);
  if (every_ == 0 || step % every_ == 0 || step == last_step) Save();
}

void TrainCheckpointer::Finish() {
  engine_->Wait();
}

}  // namespace fmstack::cli
