#include "workload/presets.h"

#include <array>

namespace fmstack::workload {
namespace {

// GPT-2 style by default: GELU, LayerNorm, learned positions, tied head, biases.
TransformerShape Dense(const char* name, int64_t layers, int64_t hidden, int64_t heads,
                       int64_t kv_heads, int64_t ffn, int64_t vocab, int64_t seq_len) {
  TransformerShape s;
  s.name = name;
  s.layers = layers;
  s.hidden = hidden;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.ffn_hidden = ffn;
  s.vocab = vocab;
  s.seq_len = seq_len;
  return s;
}

TransformerShape Gpt2(const char* name, int64_t layers, int64_t hidden, int64_t heads) {
  return Dense(name, layers, hidden, heads, heads, 4 * hidden, 50257, 1024);
}

TransformerShape Llama(const char* name, int64_t layers, int64_t hidden, int64_t heads,
                       int64_t kv_heads, int64_t ffn, int64_t vocab, int64_t seq_len) {
  TransformerShape s = Dense(name, layers, hidden, heads, kv_heads, ffn, vocab, seq_len);
  s.mlp = MlpKind::kSwiGlu;
  s.norm = NormKind::kRmsNorm;
  s.position = PositionKind::kRope;
  s.tied_embeddings = false;
  s.bias = false;
  return s;
}

TransformerShape Moe(TransformerShape s, int64_t experts, int64_t active) {
  s.experts = experts;
  s.active_experts = active;
  return s;
}

// Shapes from the models' published configs (config.json / papers).
const std::array<TransformerShape, 15>& Presets() {
  static const std::array<TransformerShape, 15> kPresets = {
      Gpt2("gpt2-124m", 12, 768, 12),
      Gpt2("gpt2-355m", 24, 1024, 16),
      Gpt2("gpt2-774m", 36, 1280, 20),
      Gpt2("gpt2-1.5b", 48, 1600, 25),
      [] {  // the reference trainer's default: small enough for a 2-core CPU
        TransformerShape s = Gpt2("gpt-mini", 6, 384, 6);
        s.vocab = 4096;
        s.seq_len = 256;
        return s;
      }(),
      Llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
      Llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
      Llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
      Llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
      Llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
      Llama("llama3.1-8b", 32, 4096, 32, 8, 14336, 128256, 131072),
      Llama("llama3.1-70b", 80, 8192, 64, 8, 28672, 128256, 131072),
      Llama("llama3.1-405b", 126, 16384, 128, 8, 53248, 128256, 131072),
      Moe(Llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 32768), 8, 2),
      Moe(Llama("mixtral-8x22b", 56, 6144, 48, 8, 16384, 32768, 65536), 8, 2),
  };
  return kPresets;
}

}  // namespace

std::optional<TransformerShape> FindPreset(std::string_view name) {
  for (const TransformerShape& s : Presets()) {
    if (s.name == name) return s;
  }
  return std::nullopt;
}

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const TransformerShape& s : Presets()) names.push_back(s.name);
  return names;
}

}  // namespace fmstack::workload
