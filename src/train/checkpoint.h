// train: what the trainer hands to ckpt/ and reads back. Tensors are named
// "model.<GPT-2 name>" (parameters), "optim.exp_avg.<name>" and
// "optim.exp_avg_sq.<name>" (AdamW moments). Replicated tensors are split
// evenly over the data-parallel ranks so that each byte is written once;
// ZeRO shards are saved as the runs each rank owns. Loading asks for element
// ranges of the same global tensors, so a checkpoint from any world size and
// ZeRO stage loads into any other.
#pragma once

#include <vector>

#include "ckpt/engine.h"
#include "train/trainer.h"

namespace fmstack::train {

// Views into the trainer's buffers: valid until the next Step().
ckpt::Snapshot CheckpointSnapshot(Trainer& trainer);

// Where a restore writes: full parameters, and this rank's moments.
std::vector<ckpt::TensorTarget> CheckpointTargets(Trainer& trainer);

// After a restore into CheckpointTargets(): checks that the checkpoint was
// saved for this model and seed (Error naming both otherwise) and sets the
// step, data position and generator state.
void FinishRestore(Trainer& trainer, const ckpt::RestoreResult& restored);

// How this trainer's schedule (train.steps, the learning rates, warm-up,
// tokens per step) differs from the one the checkpoint was written under:
// "train.steps 20 -> 40, ..."; "" when it does not, or the checkpoint
// predates the record.
std::string ScheduleChange(const TrainConfig& config, const ckpt::Manifest& manifest);

}  // namespace fmstack::train
