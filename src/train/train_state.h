// train: the trainer's counters, and the model shape as it is saved with
// weights. The trainer persists only through ckpt/ (train/checkpoint.h):
// one format for auto-resume, `train --resume`, `generate` and export.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>

#include "workload/shape.h"

namespace fmstack::train {

struct TrainCounters {
  int64_t step = 0;    // optimizer steps completed
  int64_t tokens = 0;  // training tokens consumed; the data position
  uint64_t seed = 0;   // data order and initialisation
  uint64_t rng = 0;    // state of the trainer's generator (util/random.h)
};

// The model shape as saved with weights (checkpoint manifests), and back;
// ShapeFromJson throws (nlohmann's) when a field is missing.
nlohmann::json ShapeJson(const workload::TransformerShape& shape);
workload::TransformerShape ShapeFromJson(const nlohmann::json& j);

// XXH3-64 of a float buffer: the "parameter hash" determinism is judged by.
uint64_t HashFloats(std::span<const float> data);

}  // namespace fmstack::train
