#include "workload/shape.h"

#include <fmt/format.h>

namespace fmstack::workload {

std::optional<TransformerShape::Problem> TransformerShape::FindProblem() const {
  struct Positive {
    const char* key;
    int64_t value;
  };
  for (const Positive& p :
       {Positive{"layers", layers}, Positive{"hidden", hidden}, Positive{"heads", heads},
        Positive{"kv_heads", kv_heads}, Positive{"ffn_hidden", ffn_hidden},
        Positive{"vocab", vocab}, Positive{"seq_len", seq_len}, Positive{"experts", experts},
        Positive{"active_experts", active_experts}}) {
    if (p.value <= 0)
      return Problem{p.key, fmt::format("expected a positive integer, got {}", p.value)};
  }
  if (explicit_head_dim < 0) {
    return Problem{"head_dim",
                   fmt::format("expected a positive integer, got {}", explicit_head_dim)};
  }
  if (explicit_head_dim == 0 && hidden % heads != 0) {
    return Problem{"heads", fmt::format("heads ({}) must divide hidden ({})", heads, hidden)};
  }
  if (heads % kv_heads != 0) {
    return Problem{"kv_heads",
                   fmt::format("kv_heads ({}) must divide heads ({}) for grouped-query attention",
                               kv_heads, heads)};
  }
  if (active_experts > experts) {
    return Problem{"active_experts", fmt::format("active_experts ({}) cannot exceed experts ({})",
                                                 active_experts, experts)};
  }
  return std::nullopt;
}

ParamCounts CountParams(const TransformerShape& s) {
  const int64_t d = s.hidden;
  const int64_t q_dim = s.q_dim();
  const int64_t kv_dim = s.kv_heads * s.head_dim();
  const int64_t bias = s.bias ? 1 : 0;

  // Attention: Q and O are d x q_dim (q_dim = d unless head_dim says
  // otherwise); K and V are d x kv_dim (grouped-query).
  const int64_t attention_layer = 2 * d * q_dim + 2 * d * kv_dim + bias * (q_dim + d + 2 * kv_dim);
  // MLP per expert: GELU has up (d x f) and down (f x d); SwiGLU adds a gate.
  const int64_t matrices = s.mlp == MlpKind::kSwiGlu ? 3 : 2;
  const int64_t mlp_expert =
      matrices * d * s.ffn_hidden + bias * (s.ffn_hidden * (matrices - 1) + d);
  const int64_t norm_params = s.norm == NormKind::kLayerNorm ? 2 * d : d;

  ParamCounts c;
  c.embedding = s.vocab * d + (s.position == PositionKind::kLearned ? s.seq_len * d : 0);
  c.lm_head = s.tied_embeddings ? 0 : s.vocab * d;
  c.attention = s.layers * attention_layer;
  c.mlp = s.layers * s.experts * mlp_expert;
  c.router = s.is_moe() ? s.layers * d * s.experts : 0;
  c.norms = (2 * s.layers + 1) * norm_params;
  c.expert = s.is_moe() ? c.mlp : 0;
  c.total = c.embedding + c.lm_head + c.attention + c.mlp + c.router + c.norms;
  const int64_t active_mlp = s.layers * s.active_experts * mlp_expert;
  c.active = c.total - c.mlp + active_mlp;
  c.matmul_active = c.attention + active_mlp + c.router + s.vocab * d;
  return c;
}

TrainingFlops TrainingFlopsPerToken(const TransformerShape& s) {
  const ParamCounts c = CountParams(s);
  TrainingFlops f;
  f.six_n = 6.0 * static_cast<double>(c.active);
  // Per layer and token, QK^T and (softmax)V each cost 2 * seq_len * hidden
  // multiply-adds' worth of FLOPs forward; training is 3x forward. PaLM and
  // Megatron do not halve this for the causal mask, and neither do we.
  f.attention = 12.0 * static_cast<double>(s.layers) * static_cast<double>(s.seq_len) *
                static_cast<double>(s.q_dim());
  f.detailed = 6.0 * static_cast<double>(c.matmul_active) + f.attention;
  return f;
}

double Mfu(double tokens_per_second, double flops_per_token, double accelerators,
           double peak_flops_per_accelerator) {
  return tokens_per_second * flops_per_token / (accelerators * peak_flops_per_accelerator);
}

double AcceleratorHours(double total_flops, double peak_flops, double mfu) {
  return total_flops / (peak_flops * mfu) / 3600.0;
}

double ImpliedMfu(double total_flops, double peak_flops, double accelerator_hours) {
  return total_flops / (peak_flops * accelerator_hours * 3600.0);
}

}  // namespace fmstack::workload
