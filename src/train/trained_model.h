// train: a trained model as serving and sampling need it: the shape, the
// weights (not the optimizer's moments) and the tokenizer, from a
// checkpoint a user names by path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/tokenizer.h"
#include "workload/shape.h"

namespace fmstack::train {

struct TrainedModel {
  workload::TransformerShape shape;
  std::vector<float> params;  // gpt::ParamLayout::For(shape)
  BpeTokenizer tokenizer;
  std::string source;  // "step-00000120 of runs/x/ckpt"
  uint64_t id = 0;     // XXH3 of the weights: the model's identity for caches
};

// `path`: a run's ckpt/ directory (its newest committed step), a run
// directory holding ckpt/, or one step directory. `tokenizer`: a .bpe file,
// or "" for the one the checkpoint's training data recorded. Throws Error
// naming the path and what is missing (no committed step, no model shape,
// no tokenizer, a vocabulary larger than the model's).
TrainedModel LoadTrainedModel(const std::string& path, const std::string& tokenizer);

}  // namespace fmstack::train
