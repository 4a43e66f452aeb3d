#include "workload/memory.h"

#include <algorithm>
#include <cmath>

namespace fmstack::workload {

StateBytes Bf16Everything() {
  return {"bf16 everything (seed convention)", 2, 2, 0, 4};
}
StateBytes MixedPrecision() {
  return {"mixed precision (fp32 master + moments)", 2, 2, 4, 8};
}
StateBytes Fp32() {
  return {"fp32", 4, 4, 0, 8};
}

MemoryBreakdown TrainingState(double num_params, const StateBytes& b) {
  return {num_params * b.param, num_params * b.grad, num_params * (b.master + b.optimizer), 0};
}

double CheckpointBytes(double num_params, const StateBytes& b) {
  return num_params * b.checkpoint_per_param();
}

double ActivationBytesPerLayer(const TransformerShape& shape, const Layout& layout,
                               const ActivationOptions& o) {
  const double s = static_cast<double>(o.seq_len > 0 ? o.seq_len : shape.seq_len) /
                   static_cast<double>(layout.cp);
  const double b = static_cast<double>(o.micro_batch);
  const double h = static_cast<double>(shape.hidden);
  const double f = static_cast<double>(shape.ffn_hidden);
  const double a = static_cast<double>(shape.heads);
  const double kv = static_cast<double>(shape.kv_heads * shape.head_dim());
  const double q = static_cast<double>(shape.q_dim());
  const double t = static_cast<double>(layout.tp);
  const double sbh = s * b * h;

  if (o.recompute == Recompute::kFull) {
    // Only the layer input is kept; everything else is recomputed.
    return 2 * sbh / (o.sequence_parallel ? t : 1);
  }
  // Attention block (Korthikanti eq. 1 is 11sbh + 5as^2b for MHA): LN input
  // 2sbh, QKV input 2sbh, Q 2sb*q, K and V 2sb*kv each, projection input
  // 2sb*q, dropout mask sbh (q = h unless the heads are narrower or wider).
  const double attention_linear =
      2 * sbh + 2 * sbh + 2 * s * b * q + 4 * s * b * kv + 2 * s * b * q + sbh;
  // Score matrix: softmax output 2as^2b, its dropout mask as^2b, dropout out
  // 2as^2b. Flash attention keeps only the output and a row statistic instead.
  const bool keep_scores = !o.flash_attention && o.recompute == Recompute::kNone;
  const double scores = keep_scores ? 5 * a * s * s * b : 4 * s * b * a;
  // MLP: LN input 2sbh, up input 2sbh, dropout mask sbh, plus 2sbf for every
  // intermediate the backward needs (GELU: input and output; SwiGLU: gate, up,
  // product).
  const double intermediates = shape.mlp == MlpKind::kSwiGlu ? 3 : 2;
  const double active_experts = static_cast<double>(shape.active_experts);
  const double mlp = 5 * sbh + intermediates * 2 * s * b * f * active_experts;

  // Inside TP regions everything splits by t. Outside them (LayerNorm inputs,
  // dropout masks, and the inputs of the column-parallel QKV and up
  // projections) activations are replicated unless sequence parallelism splits
  // them too: Korthikanti's 10 + 24/t versus 34/t.
  const double replicated = 4 * sbh + 2 * sbh + 4 * sbh;
  const double split = attention_linear + scores + mlp - replicated;
  return split / t + replicated / (o.sequence_parallel ? t : 1);
}

MemoryBreakdown PerAccelerator(const TransformerShape& shape, const StateBytes& bytes,
                               const Layout& layout, const ActivationOptions& options) {
  const ParamCounts c = CountParams(shape);
  // Model parallelism splits every weight by tp*pp (embedding and head are
  // assumed spread evenly over stages); experts split further by ep.
  const double model_parallel = static_cast<double>(layout.tp * layout.pp);
  const double dense = static_cast<double>(c.total - c.expert);
  const double expert = static_cast<double>(c.expert);
  const double params_here =
      dense / model_parallel + expert / (model_parallel * static_cast<double>(layout.ep));
  // ZeRO shards over every replica of a weight: the data-parallel ranks and,
  // as in Megatron-Core's distributed optimizer, the context-parallel ones
  // (experts: over dp / ep replicas).
  const double dp = static_cast<double>(layout.dp * layout.cp);
  const double shard = std::max(1.0, dp);
  auto sharded = [&](int from_stage) { return layout.zero_stage >= from_stage ? shard : 1.0; };

  MemoryBreakdown m;
  m.params = params_here * bytes.param / sharded(3);
  m.grads = params_here * bytes.grad / sharded(2);
  m.optimizer = params_here * (bytes.master + bytes.optimizer) / sharded(1);
  // First stage holds min(pp, micro-batches) in flight under 1F1B, each of
  // layers/pp layers: layers x one micro-batch in the common case.
  m.activations =
      static_cast<double>(shape.layers) * ActivationBytesPerLayer(shape, layout, options);
  return m;
}

int64_t MinDevices(double bytes, double capacity_per_device) {
  // Divide in whole bytes so that 560 GB / 80 GB is exactly 7.
  const auto need = static_cast<int64_t>(std::llround(bytes));
  const auto each = static_cast<int64_t>(std::llround(capacity_per_device));
  return (need + each - 1) / each;
}

double ReferenceTrainerActivationBytes(const TransformerShape& shape, int64_t B, int64_t T) {
  const double N = static_cast<double>(B * T), C = static_cast<double>(shape.hidden);
  const double F = static_cast<double>(shape.ffn_hidden), V = static_cast<double>(shape.vocab);
  const double scores = static_cast<double>(B * shape.heads * T * T);
  // Per layer: ln1, qkv, atty, residual2, ln2, residual3 (8C), fch and its GELU
  // (2F), two LayerNorm mean/rstd pairs (4), and the softmax probabilities.
  const double per_layer = N * (8 * C + 2 * F + 4) + scores;
  // Once: embeddings, final LayerNorm (+ mean/rstd), logits, per-token losses.
  const double once = N * (2 * C + 2 + V + 1);
  // Backward scratch: dresidual, dln, dqkv, datty (6C), dfch (F), dscores.
  const double scratch = N * (6 * C + F) + scores;
  return 4.0 * (static_cast<double>(shape.layers) * per_layer + once + scratch);
}

}  // namespace fmstack::workload
