// The [model] section: a preset name and/or explicit shape fields.
#include <fmt/format.h>

#include "spec/job_spec.h"
#include "workload/presets.h"

namespace fmstack::spec {
namespace {

workload::TransformerShape Preset(StrictTable& t, std::string_view key, const std::string& name) {
  std::optional<workload::TransformerShape> shape = workload::FindPreset(name);
  if (!shape) {
    const std::vector<std::string> names = workload::PresetNames();
    t.Fail(key, "unknown model preset \"" + name + "\"", DidYouMeanOrList(name, names, "presets"));
  }
  return *shape;
}

void Override(StrictTable& t, workload::TransformerShape& s) {
  static const std::vector<std::string> kMlp = {"gelu", "swiglu"};
  static const std::vector<std::string> kNorm = {"layernorm", "rmsnorm"};
  static const std::vector<std::string> kPosition = {"learned", "rope"};
  s.name = t.String("name").value_or(s.name);
  s.layers = t.Int("layers", 1, 100000).value_or(s.layers);
  s.hidden = t.Int("hidden", 1, 1 << 20).value_or(s.hidden);
  s.heads = t.Int("heads", 1, 1 << 16).value_or(s.heads);
  // Overriding heads alone means plain multi-head attention.
  s.kv_heads = t.Int("kv_heads", 1, 1 << 16).value_or(t.Has("heads") ? s.heads : s.kv_heads);
  // Overriding the shape without head_dim means heads of hidden / heads.
  s.explicit_head_dim = t.Int("head_dim", 1, 1 << 16)
                            .value_or(t.Has("heads") || t.Has("hidden") ? 0 : s.explicit_head_dim);
  s.ffn_hidden = t.Int("ffn_hidden", 1, 1 << 24).value_or(s.ffn_hidden);
  s.vocab = t.Int("vocab", 1, 1 << 24).value_or(s.vocab);
  s.seq_len = t.Int("seq_len", 1, 1 << 24).value_or(s.seq_len);
  if (auto v = t.Choice("mlp", kMlp))
    s.mlp = *v == "gelu" ? workload::MlpKind::kGelu : workload::MlpKind::kSwiGlu;
  if (auto v = t.Choice("norm", kNorm)) {
    s.norm = *v == "layernorm" ? workload::NormKind::kLayerNorm : workload::NormKind::kRmsNorm;
  }
  if (auto v = t.Choice("position", kPosition)) {
    s.position = *v == "learned" ? workload::PositionKind::kLearned : workload::PositionKind::kRope;
  }
  s.tied_embeddings = t.Bool("tied_embeddings").value_or(s.tied_embeddings);
  s.bias = t.Bool("bias").value_or(s.bias);
  s.experts = t.Int("experts", 1, 1 << 16).value_or(s.experts);
  s.active_experts = t.Int("active_experts", 1, 1 << 16).value_or(s.active_experts);
}

}  // namespace

workload::TransformerShape ReadModel(StrictTable& root) {
  const toml::node* node = root.Peek("model");
  if (node == nullptr) {
    // A cluster file given where a job file goes is the common case.
    if (root.Contains("cluster") && !root.Contains("train") && !root.Contains("name"))
      root.Fail("model",
                "is required: this looks like a cluster file (only [cluster]); give a job file, "
                "and this one with --cluster FILE (or cluster = \"FILE\" in the job)");
    root.Fail("model", "is required: a preset name (model = \"llama3-70b\") or a [model] table");
  }
  if (!node->is_table()) {  // `model = "name"`; String() reports any other type
    return Preset(root, "model", *root.String("model"));
  }
  std::optional<StrictTable> table = root.Table("model");
  workload::TransformerShape shape;
  if (auto preset = table->String("preset")) {
    shape = Preset(*table, "preset", *preset);
  } else {
    shape.name = "custom";
    // A shape from scratch needs every dimension.
    for (const char* key : {"layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len"}) {
      if (!table->Has(key)) table->Fail(key, "is required when [model] has no preset");
    }
  }
  Override(*table, shape);
  if (const auto problem = shape.FindProblem()) table->Fail(problem->key, problem->message);
  table->Finish();
  return shape;
}

}  // namespace fmstack::spec
