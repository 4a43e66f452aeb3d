// cli: checkpointing inside `fmstack train`: auto-resume from the newest
// checkpoint every rank can load, and saves at a cadence every rank agrees
// on (fixed, or Young/Daly from the measured blocking time and the MTTI).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "catalog/catalog.h"
#include "ckpt/engine.h"
#include "spec/job_spec.h"
#include "train/trainer.h"

namespace fmstack::cli {

class TrainCheckpointer {
 public:
  using Note = std::function<void(const std::string&)>;
  TrainCheckpointer(const spec::JobSpec& job, const catalog::Catalog& catalog,
                    const std::string& out, train::Trainer& trainer, Note note);

  // Restores the newest checkpoint that every rank loaded (collective).
  // Returns its step, or nullopt when there is none.
  std::optional<int64_t> Resume();
  // After each optimizer step (collective when it saves).
  void AfterStep(double step_seconds, int64_t last_step);
  // Waits for every tier; throws the first error.
  void Finish();

  int64_t every_steps() const { return every_; }

 private:
  void Save();
  void ChooseCadence(double blocking_seconds);
  double Mtti(std::string* source) const;

  const spec::JobSpec& job_;
  const catalog::Catalog& catalog_;  // fault rates for the MTTI when the cluster has none
  train::Trainer& trainer_;
  Note note_;
  std::unique_ptr<ckpt::Engine> engine_;
  int64_t every_ = 0;  // steps between saves; 0 = not chosen yet
  double step_seconds_sum_ = 0;
  int64_t steps_seen_ = 0;
};

}  // namespace fmstack::cli
