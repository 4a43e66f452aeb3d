// train: TrainState — everything a resume needs, and its file. The trainer
// owns the buffers; TrainState points into them, so saving copies nothing.
// The checkpoint engine (ckpt/) serialises exactly these fields.
//
// File format: magic "FMSTATE1", uint64 length of a JSON header, the header
// (model shape, counters, per-array count and XXH3-64), zero padding to a
// multiple of 64 bytes, then params, m, v as float32 arrays. Written to a
// temp file, fsynced and renamed, so a crash leaves the previous file whole.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "workload/shape.h"

namespace fmstack::train {

struct TrainCounters {
  int64_t step = 0;    // optimizer steps completed
  int64_t tokens = 0;  // training tokens consumed; the data position
  uint64_t seed = 0;   // data order and initialisation
  uint64_t rng = 0;    // state of the trainer's generator (util/random.h)
};

struct TrainState {
  std::span<float> params, m, v;
  TrainCounters counters;
};

struct TrainStateHeader {
  workload::TransformerShape shape;
  TrainCounters counters;
  std::string data_dir;  // where the tokenizer that goes with these weights lives
  int64_t count = 0;     // floats per array
};

void SaveTrainState(const std::string& path, const workload::TransformerShape& shape,
                    const TrainState& state, const std::string& data_dir);

// Reads and validates the header only.
TrainStateHeader ReadTrainStateHeader(const std::string& path);

// Loads into `state`'s buffers after checking that the file's model shape
// equals `shape` and every array's checksum; throws Error naming the file and
// the mismatch. On error, `state` may be partly overwritten.
TrainStateHeader LoadTrainState(const std::string& path, const workload::TransformerShape& shape,
                                TrainState& state);

// The model shape as saved with weights (here and in checkpoint manifests).
nlohmann::json ShapeJson(const workload::TransformerShape& shape);

// XXH3-64 of a float buffer: the "parameter hash" determinism is judged by.
uint64_t HashFloats(std::span<const float> data);

}  // namespace fmstack::train
