// workload: memory per accelerator for training and inference, for a byte
// convention, ZeRO/FSDP stage, TP/PP/DP/EP/CP split and activation recompute.
#pragma once

#include <cstdint>
#include <string>

#include "workload/shape.h"

namespace fmstack::workload {

// Bytes per parameter of each kind of training state.
struct StateBytes {
  std::string name;
  double param = 2;  // the weights the forward pass reads
  double grad = 2;
  double master = 0;     // fp32 master copy of the weights (mixed precision)
  double optimizer = 4;  // AdamW first + second moment together

  double per_param() const { return param + grad + master + optimizer; }
  // What a checkpoint must hold to resume: weights, master copy, optimizer.
  double checkpoint_per_param() const { return param + master + optimizer; }
};

// The seeds' convention: everything in BF16 (2 + 2 + 2x2 = 8 bytes/param).
StateBytes Bf16Everything();
// Standard mixed precision: bf16 weights and grads, fp32 master and moments
// (2 + 2 + 4 + 8 = 16 bytes/param; ZeRO paper's "K = 12" optimizer part).
StateBytes MixedPrecision();
// Pure fp32 training (4 + 4 + 8 = 16 bytes/param).
StateBytes Fp32();

enum class Recompute { kNone, kSelective, kFull };

struct Layout {
  int64_t dp = 1, tp = 1, pp = 1, ep = 1, cp = 1;
  int zero_stage = 0;          // 0: DDP; 1: shard optimizer; 2: + grads; 3 (FSDP): + params
  int64_t virtual_stages = 1;  // interleaved 1F1B: model chunks per pipeline rank
  // With tp > 1: activations outside the TP regions (norms, dropout,
  // residual) are split by tp too (Korthikanti et al. 2022); false keeps
  // them whole on every TP rank, as Megatron-LM did before.
  bool sequence_parallel = true;
  // The fraction of the MoE all-to-alls hidden behind expert compute
  // (DeepSeek-V3's dual-pipe hides nearly all; a plain implementation none).
  double ep_overlap = 0;
  // ZeRO-3: the next layer's parameters are gathered while this one computes.
  bool fsdp_prefetch = true;
  // Context parallelism's exchange of keys and values. kP2p passes chunks
  // around a ring beside each chunk's attention (Megatron-Core's default);
  // kAllGather gathers them whole before attention (Llama 3), exposed.
  enum class CpComm { kP2p, kAllGather };
  CpComm cp_comm = CpComm::kP2p;
  // Under a causal mask, a rank holding one contiguous slice of the sequence
  // does work growing with its position; splitting it into 2 x cp chunks
  // and giving rank i chunks i and 2cp-1-i evens it out.
  bool cp_load_balance = true;

  int64_t world() const { return dp * tp * pp * cp; }  // ep lives inside dp
};

struct ActivationOptions {
  int64_t micro_batch = 1;  // sequences per micro-batch per DP rank
  int64_t seq_len = 0;      // 0: the shape's seq_len
  Recompute recompute = Recompute::kNone;
  bool flash_attention = true;    // no seq_len^2 score matrix is kept
  bool sequence_parallel = true;  // activations outside TP regions also split by tp
};

struct MemoryBreakdown {
  double params = 0, grads = 0, optimizer = 0, activations = 0;  // bytes

  double state() const { return params + grads + optimizer; }
  double total() const { return state() + activations; }
};

// The whole model's state with no sharding: the seeds' "560 GB" figure.
MemoryBreakdown TrainingState(double num_params, const StateBytes& bytes);

// Bytes of one checkpoint (weights + master + optimizer; no gradients).
double CheckpointBytes(double num_params, const StateBytes& bytes);

// Activation bytes of one transformer layer for one micro-batch on one rank,
// after Korthikanti et al. 2022 ("Reducing Activation Recomputation"),
// generalised to GQA, SwiGLU and flash attention. 2-byte activations.
double ActivationBytesPerLayer(const TransformerShape& shape, const Layout& layout,
                               const ActivationOptions& options);

// Activation bytes of fmstack's fp32 reference trainer (gpt/) for B sequences
// of T tokens: what the forward pass keeps for backward, plus the per-layer
// gradient scratch that backward reuses. No recompute, explicit T x T scores.
double ReferenceTrainerActivationBytes(const TransformerShape& shape, int64_t B, int64_t T);

// Per-accelerator memory of the most loaded rank (first pipeline stage: with
// 1F1B it holds pp micro-batches in flight, i.e. activations of all layers).
MemoryBreakdown PerAccelerator(const TransformerShape& shape, const StateBytes& bytes,
                               const Layout& layout, const ActivationOptions& options);

// ceil(bytes / capacity): the fewest devices whose memory adds up to `bytes`.
int64_t MinDevices(double bytes, double capacity_per_device);

}  // namespace fmstack::workload
