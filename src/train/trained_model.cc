#include "train/trained_model.h"

#include <fmt/format.h>

#include <filesystem>

#include "ckpt/restore.h"
#include "ckpt/tier.h"
#include "gpt/layout.h"
#include "train/train_state.h"
#include "util/error.h"
#include "util/xxh3.h"

namespace fmstack::train {

TrainedModel LoadTrainedModel(const std::string& path, const std::string& tokenizer) {
  std::string where = path;
  std::error_code ec;
  if (std::filesystem::is_directory(std::filesystem::path(path) / "ckpt", ec))
    where = (std::filesystem::path(path) / "ckpt").string();  // a run directory
  const ckpt::CheckpointDir dir = ckpt::OpenCheckpointDir(where);
  std::optional<int64_t> step = dir.step;
  if (!step) {
    for (const ckpt::StepListing& l : dir.tier->List())
      if (l.committed && (!step || l.step > *step)) step = l.step;
    if (!step) throw Error(where + ": no committed checkpoint (a step directory with COMMITTED)");
  }
  const ckpt::Manifest manifest = ckpt::ReadManifest(*dir.tier, *step);
  workload::TransformerShape shape;
  try {
    shape = ShapeFromJson(manifest.model);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: the manifest of {} has no usable model shape ({})", where,
                            ckpt::StepDirName(*step), e.what()));
  }
  const std::string data_dir = manifest.model.value("data_dir", "");
  if (tokenizer.empty() && data_dir.empty())
    throw Error(where + ": the checkpoint does not say where its tokenizer is; pass --tokenizer");
  const std::string tok_path = tokenizer.empty() ? data_dir + "/tokenizer.bpe" : tokenizer;
  TrainedModel m{shape, {}, BpeTokenizer::Load(tok_path), {}, 0};
  if (m.tokenizer.vocab_size() > m.shape.vocab)
    throw Error(fmt::format("{}: vocabulary {} is larger than the model's {}", tok_path,
                            m.tokenizer.vocab_size(), m.shape.vocab));
  const gpt::ParamLayout layout = gpt::ParamLayout::For(m.shape);
  m.params.resize(static_cast<size_t>(layout.total));
  std::vector<ckpt::TensorTarget> targets;
  for (const gpt::TensorInfo& t : layout.Tensors()) {
    targets.push_back({"model." + t.name, ckpt::DType::kF32, 0,
                       std::as_writable_bytes(std::span<float>(m.params).subspan(
                           static_cast<size_t>(t.offset), static_cast<size_t>(t.size())))});
  }
  ckpt::ReadCopy(*dir.tier, *step, targets);
  m.source = fmt::format("{} of {}", ckpt::StepDirName(*step), where);
  m.id = Xxh3(m.params.data(), m.params.size() * sizeof(float));
  return m;
}

}  // namespace fmstack::train
