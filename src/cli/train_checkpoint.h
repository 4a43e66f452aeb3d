// cli: checkpointing inside `fmstack train`: auto-resume from the newest
// checkpoint every rank can load, and saves at a cadence every rank agrees
// on (fixed, or Young/Daly from the measured blocking time and the MTTI).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "catalog/catalog.h"
#include "ckpt/engine.h"
#include "spec/job_spec.h"
#include "train/trainer.h"

namespace fmstack::cli {

// The fast checkpoint tier failed (disk full, I/O error): the run cannot
// keep its promise of not losing work, so the worker reports it as a fault.
class CheckpointFailed : public Error {
 public:
  using Error::Error;
};

class TrainCheckpointer {
 public:
  using Note = std::function<void(const std::string&)>;
  // A `joining` rank replaces a lost one in a running job: it must not
  // clean up the steps its peers are still writing.
  // Saves are live (ckpt::Snapshot::live): written straight from the
  // trainer's memory while the next step's forward and backward passes run,
  // and released by the trainer before it changes that memory
  // (Trainer::set_before_state_change, which this sets and clears).
  TrainCheckpointer(const spec::JobSpec& job, const catalog::Catalog& catalog,
                    const std::string& out, train::Trainer& trainer, Note note,
                    bool joining = false);
  ~TrainCheckpointer();
  TrainCheckpointer(const TrainCheckpointer&) = delete;
  TrainCheckpointer& operator=(const TrainCheckpointer&) = delete;

  // Restores the newest checkpoint that every rank loaded (collective),
  // no newer than `max_step` when given, from the job's own tiers or, with
  // `from`, from a checkpoint directory (any world size, any ZeRO stage).
  // Returns its step, or nullopt when there is none (an error with `from`).
  std::optional<int64_t> Resume(std::optional<int64_t> max_step = std::nullopt,
                                const std::string& from = "");
  // Rank 0: each commit of a step on a tier (step, tier, seconds since the
  // save began), from the engine's threads; set before the first save.
  using CommitFn = std::function<void(int64_t, const std::string&, double)>;
  void OnCommitted(CommitFn fn) { on_committed_ = std::move(fn); }
  // After each optimizer step (collective when it saves). Returns the save's
  // timing when it saved.
  std::optional<ckpt::SaveTiming> AfterStep(double step_seconds, int64_t last_step);
  // Seconds the trainer waited in releases of live saves since the last call
  // (they run inside Trainer::Step, before its update).
  double TakeReleaseSeconds() { return std::exchange(release_in_step_, 0.0); }
  // Whether the job's own tiers hold a committed checkpoint.
  bool HasOwn() { return engine_->Latest().has_value(); }
  // Saves the current step now, whatever the cadence (collective).
  ckpt::SaveTiming SaveNow();
  // Waits for every tier; throws the first error.
  void Finish();
  // Seconds the last Resume() spent reading.
  double restore_seconds() const { return restore_seconds_; }

  // Fault rehearsal: the next save's shard write fails with ENOSPC, or the
  // process is killed right after writing its shard (before the commit).
  void FailNextWrite() { fail_next_write_ = true; }
  void DieDuringNextSave() { die_during_save_ = true; }

  // After a checkpointless recovery (collective): the ranks agree on the
  // cadence and on the newest step any of them began to save. A rank that
  // saved a step does not save it again when the restored job reaches it
  // once more; one that did not (a replacement) writes its part then, or
  // now when the job stands at that step, so that the step commits.
  void Rejoined();
  // After an elastic reshape (collective over the new group): a save in
  // flight is abandoned (the ranks that left never finish it), and the
  // engine starts again as this rank of the new world. Steps up to the
  // current one are not saved again; the cadence is the group's.
  void Reshaped();

 private:
  ckpt::SaveTiming Save();
  // The trainer is about to change the state a live save reads: the save
  // copies what it has not written yet. Throws CheckpointFailed.
  void ReleaseState();
  std::unique_ptr<ckpt::Engine> MakeEngine(bool collect_garbage);
  // Collective: the group's cadence (the largest every_) and the newest
  // step any rank began to save.
  struct GroupSaves {
    int64_t every = 0, newest_saved = -1;
  };
  GroupSaves AgreeOnSaves();
  void ChooseCadence(double blocking_seconds);
  double Mtti(std::string* source) const;

  const spec::JobSpec& job_;
  std::string out_;
  const catalog::Catalog& catalog_;  // fault rates for the MTTI when the cluster has none
  train::Trainer& trainer_;
  Note note_;
  CommitFn on_committed_;
  std::unique_ptr<ckpt::Engine> engine_;
  int64_t every_ = 0;  // steps between saves; 0 = not chosen yet
  // The first save's cost to training is its Save() and its release in the
  // next step: the cadence is chosen once both are known.
  bool cadence_due_ = false;
  double first_blocking_ = 0, last_release_ = 0;
  double release_in_step_ = 0;  // TakeReleaseSeconds
  int64_t saved_through_ = -1;
  double step_seconds_sum_ = 0;
  int64_t steps_seen_ = 0;
  double restore_seconds_ = 0;
  std::atomic<bool> fail_next_write_{false}, die_during_save_{false};
};

}  // namespace fmstack::cli
