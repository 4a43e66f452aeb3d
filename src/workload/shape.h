// workload: the one definition of a transformer's shape, and the exact math on
// it: parameter counts, FLOPs per token and MFU. plan/ and sim/ compute with
// it; gpt/ allocates with it (a test checks the two agree).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fmstack::workload {

enum class MlpKind { kGelu, kSwiGlu };         // GPT-2: GELU (2 matrices); Llama: SwiGLU (3)
enum class NormKind { kLayerNorm, kRmsNorm };  // LayerNorm has a bias, RMSNorm only a gain
enum class PositionKind { kLearned, kRope };   // learned table (GPT-2) or rotary (no params)

struct TransformerShape {
  std::string name;
  int64_t layers = 0;
  int64_t hidden = 0;      // d_model
  int64_t heads = 0;       // query heads
  int64_t kv_heads = 0;    // == heads without GQA
  int64_t ffn_hidden = 0;  // per expert for MoE
  int64_t vocab = 0;
  int64_t seq_len = 0;  // context length the model is trained with
  MlpKind mlp = MlpKind::kGelu;
  NormKind norm = NormKind::kLayerNorm;
  PositionKind position = PositionKind::kLearned;
  bool tied_embeddings = true;  // LM head shares the token embedding matrix
  bool bias = true;             // biases in every linear layer (GPT-2 style)
  int64_t experts = 1;          // MoE experts per layer; 1 = dense
  int64_t active_experts = 1;   // experts each token is routed to (top-k)
  // Width of one attention head where it is not hidden / heads (PaLM 540B:
  // 48 heads of 256 on a hidden size of 18432); 0 = hidden / heads.
  int64_t explicit_head_dim = 0;

  int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : hidden / heads; }
  int64_t q_dim() const { return heads * head_dim(); }  // queries' width: Q's and O's other side
  bool is_moe() const { return experts > 1; }

  struct Problem {
    std::string key;  // the spec's key for the offending field
    std::string message;
  };
  // The first inconsistency ("heads (12) must divide hidden (770)"), or
  // nullopt when the shape is buildable.
  std::optional<Problem> FindProblem() const;
};

// Exact parameter counts, by where they live.
struct ParamCounts {
  int64_t embedding = 0;  // token + learned position embeddings
  int64_t lm_head = 0;    // 0 when tied to the token embedding
  int64_t attention = 0;  // Q, K, V, O projections (+ biases), all layers
  int64_t mlp = 0;        // all layers, all experts
  int64_t router = 0;     // MoE gates
  int64_t norms = 0;      // every LayerNorm / RMSNorm, final one included
  int64_t total = 0;
  int64_t active = 0;         // used by one token: MoE counts top-k experts only
  int64_t expert = 0;         // the part of `mlp` that lives in experts (0 if dense)
  int64_t matmul_active = 0;  // weights one token multiplies with (LM head included, tied or not)
};

ParamCounts CountParams(const TransformerShape& shape);

// Training FLOPs per token (forward + backward = 3 x forward).
struct TrainingFlops {
  double six_n = 0;      // 6 x active parameters: the seeds' and Kaplan's approximation
  double detailed = 0;   // 6 x matmul weights + attention scores (Megatron / PaLM count)
  double attention = 0;  // 12 x layers x seq_len x hidden: QK^T and AV, causal not halved
};

TrainingFlops TrainingFlopsPerToken(const TransformerShape& shape);

// Model FLOPs utilization: achieved model FLOP/s over the accelerators' peak.
double Mfu(double tokens_per_second, double flops_per_token, double accelerators,
           double peak_flops_per_accelerator);

// Accelerator-hours to train `tokens` at a given MFU, and its inverse.
double AcceleratorHours(double total_flops, double peak_flops, double mfu);
double ImpliedMfu(double total_flops, double peak_flops, double accelerator_hours);

}  // namespace fmstack::workload
