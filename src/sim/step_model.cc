#include "sim/step_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/error.h"
#include "workload/memory.h"
#include "workload/shape.h"

namespace fmstack::sim {
namespace {

// A collective on the levels a group crosses: measured busbw when the group
// leaves the scale-up domain and a curve for the op was given, else the model.
double Coll(const StepOptions& o, Collective c, double bytes,
            const std::vector<LinkLevel>& levels) {
  const bool crosses_network =
      levels.size() > 1 ||
      (levels.size() == 1 && levels[0].name != "scale-up" && levels[0].name != "self");
  if (o.measured != nullptr && crosses_network && o.measured->Has(c)) {
    int ranks = 1;
    for (const LinkLevel& l : levels) ranks *= l.ranks;
    return o.measured->Time(c, bytes, ranks);
  }
  return HierarchicalTime(c, bytes, levels);
}

// Elementwise kernels move bytes, not FLOPs: per token and layer they touch
// a few multiples of the hidden size (two norms, two bias-dropout-residual
// adds: ~12 h reads and writes), of the MLP width (the activation function),
// and - without flash attention - of heads x sequence (mask, softmax and
// dropout on the attention scores). Their share shrinks as the hidden size
// grows, which is why achieved TFLOP/s rise with model size.
double MemoryBoundSeconds(const spec::JobSpec& job, const catalog::Accelerator& accelerator,
                          const StepOptions& o, double global_batch) {
  if (accelerator.hbm_bandwidth <= 0) return 0;
  const workload::TransformerShape& shape = job.model;
  const workload::Layout& l = job.layout;
  const double tp = static_cast<double>(l.tp);
  const bool sp = o.sequence_parallel && l.sequence_parallel;
  const double hidden_wide = 12.0 * static_cast<double>(shape.hidden) / (sp ? tp : 1.0);
  const double mlp_wide = (shape.mlp == workload::MlpKind::kSwiGlu ? 3.0 : 2.0) *
                          static_cast<double>(shape.ffn_hidden) / tp;
  const double scores = job.train.flash_attention ? 0.0
                                                  : 4.5 * static_cast<double>(shape.heads) / tp *
                                                        static_cast<double>(shape.seq_len);
  // Forward once, backward about twice; recomputation repeats the forward
  // (full) or the attention core (selective).
  double passes = 3, score_passes = 3;
  if (job.train.recompute == workload::Recompute::kFull) passes = score_passes = 4;
  if (job.train.recompute == workload::Recompute::kSelective) score_passes = 4;
  const double per_token_layer =
      (passes * (hidden_wide + mlp_wide) + score_passes * scores) * o.bytes_per_activation;
  // A TP rank sees every token of its replica; a PP rank only its layers.
  const double tokens =
      global_batch * static_cast<double>(shape.seq_len) / static_cast<double>(l.dp * l.cp);
  const double layers = static_cast<double>(shape.layers) / static_cast<double>(l.pp);
  return tokens * layers * per_token_layer / (accelerator.hbm_bandwidth * o.memory_efficiency);
}

// FSDP / ZeRO-3, one micro-batch on one pipeline stage, layer by layer
// (Zhao et al., PyTorch FSDP, 2023): forward all-gathers each layer's
// parameters; backward gathers them again and reduce-scatters the layer's
// gradients. The collectives of one micro-batch run in order on one stream,
// so a layer's backward shares the network between its gather and the
// previous layer's reduce-scatter. With prefetch, layer i + 1's gather runs
// beside layer i's compute (FSDP's default: one layer ahead, two buffers),
// so a layer costs the longer of its compute and its communication, and
// only the first gather and the last reduce-scatter have nothing beside
// them. One layer ahead is all uniform layers need; without prefetch every
// gather waits for the compute before it.
struct FsdpTime {
  double comm = 0;     // every collective's time, whole
  double exposed = 0;  // beyond the compute it overlaps
};

FsdpTime FsdpMicroBatch(const StepOptions& o, const spec::JobSpec& job, double layers,
                        double local_params, double compute,
                        const std::vector<LinkLevel>& replicas) {
  const double bytes = local_params / layers * o.bytes_per_gradient;  // one layer, gathered
  const double gather = Coll(o, Collective::kAllGather, bytes, replicas);
  const double scatter = Coll(o, Collective::kReduceScatter, bytes, replicas);
  // Forward is a third of the work; a quarter when backward recomputes it.
  const double forward_share = job.train.recompute == workload::Recompute::kFull ? 0.25 : 1.0 / 3.0;
  const double forward = compute * forward_share / layers;
  const double backward = compute * (1 - forward_share) / layers;
  FsdpTime f;
  f.comm = layers * (2 * gather + scatter);
  double wall = 0;
  // Beside compute, NCCL's kernels take SMs from it: only `fsdp_overlap` of
  // the shorter of the two is hidden.
  const auto beside = [&](double work, double comm) {
    return std::max(work, comm) + (1 - o.fsdp_overlap) * std::min(work, comm);
  };
  if (job.layout.fsdp_prefetch) {
    wall = gather + (layers - 1) * beside(forward, gather) + forward +  // forward pass
           gather + (layers - 1) * beside(backward, gather + scatter) + backward + scatter;
  } else {
    wall = layers * (gather + forward) + layers * (gather + backward + scatter);
  }
  f.exposed = std::max(0.0, wall - compute);
  return f;
}

}  // namespace

StepTime ModelStep(const spec::JobSpec& job, const Topology& topo,
                   const catalog::Accelerator& accelerator, const StepOptions& o) {
  const workload::TransformerShape& shape = job.model;
  const workload::Layout& l = job.layout;
  const int64_t world = l.world();
  if (world != topo.accelerators) {
    throw SpecError(job.PosOf("parallel"), "parallel",
                    fmt::format("dp x tp x pp x cp = {} but the cluster has {} accelerators", world,
                                topo.accelerators));
  }
  const int64_t b = job.train.micro_batch;
  const int64_t global = job.train.global_batch > 0 ? job.train.global_batch : b * l.dp;
  if (global % (b * l.dp) != 0) {
    throw SpecError(job.PosOf("train.global_batch"), "train.global_batch",
                    fmt::format("{} is not a multiple of micro_batch x dp = {}", global, b * l.dp));
  }
  StepTime t;
  t.micro_batches = global / (b * l.dp);
  const double m = static_cast<double>(t.micro_batches);
  const double s = static_cast<double>(shape.seq_len) / static_cast<double>(l.cp);
  const double h = static_cast<double>(shape.hidden);
  const double layers_per_stage = static_cast<double>(shape.layers) / static_cast<double>(l.pp);
  const bool full_recompute = job.train.recompute == workload::Recompute::kFull;

  // Compute: the model FLOPs, plus the forward pass again under full
  // recomputation (what Megatron-LM's Table 1 counts as achieved FLOP/s).
  const double tokens = static_cast<double>(global * shape.seq_len);
  const double model_flops = workload::TrainingFlopsPerToken(shape).detailed * tokens;
  const double hardware_flops = model_flops * (full_recompute ? 4.0 / 3.0 : 1.0);
  const double peak = accelerator.PeakFlops(job.train.precision);
  if (peak <= 0)
    throw Error(fmt::format("{} has no peak FLOP/s for this precision", accelerator.name));
  const double achieved = peak * o.compute_efficiency;
  // The FLOP count above is Megatron's and PaLM's, which do not halve the
  // attention scores for the causal mask; flash attention skips the masked
  // tiles, so the time is for half of them.
  const double recompute_factor = full_recompute ? 4.0 / 3.0 : 1.0;
  const double attention_flops =
      workload::TrainingFlopsPerToken(shape).attention * tokens * recompute_factor;
  // Flash attention's backward recomputes the scores instead of storing
  // them: 2.5 forward passes' worth of work where the count above has 2
  // (FlashAttention-2's benchmarks count the backward as 2.5x the forward,
  // and its published TFLOP/s are in those units). Forward and backward run
  // at the kernel's own measured rates where the catalog has them, when
  // those are below the GEMMs' (FlashAttention-2 on H100).
  const double passes = 3.0 * recompute_factor;
  const double forward_passes = passes - 2.0;
  const auto flash_rate = [&](double measured) {
    return measured > 0 ? std::min(achieved, measured) : achieved;
  };
  const bool flash = job.train.flash_attention;
  const double done = flash ? 0.5 : 1.0;  // of the counted scores
  const double backward_passes = flash ? 2.5 : 2.0;
  const double measured_backward = accelerator.flash_attention_backward_flops > 0
                                       ? accelerator.flash_attention_backward_flops
                                       : accelerator.flash_attention_flops;
  const double forward_rate = flash ? flash_rate(accelerator.flash_attention_flops) : achieved;
  const double backward_rate = flash ? flash_rate(measured_backward) : achieved;
  const double per_rank = attention_flops / static_cast<double>(world);
  const double attention_forward_seconds = done * per_rank * forward_passes / passes / forward_rate;
  const double attention_backward_seconds =
      done * per_rank * backward_passes / passes / backward_rate;
  const double attention_seconds = attention_forward_seconds + attention_backward_seconds;
  t.compute = (hardware_flops - attention_flops) / static_cast<double>(world) / achieved +
              attention_seconds;
  // Context parallelism without load balancing: under the causal mask the
  // rank holding the sequence's end does (2cp - 1) / cp of the mean
  // attention work, and every rank waits for it.
  if (l.cp > 1 && !l.cp_load_balance && job.train.flash_attention) {
    const double c = static_cast<double>(l.cp);
    t.compute += attention_seconds * (c - 1) / c;
  }
  t.memory = MemoryBoundSeconds(job, accelerator, o, static_cast<double>(global));
  // Interleaving v model chunks per rank divides the bubble by v (Megatron-LM).
  const double v = static_cast<double>(std::max<int64_t>(1, l.virtual_stages));
  t.bubble = (t.compute + t.memory) * static_cast<double>(l.pp - 1) / (m * v);

  // Rank order tp, cp, dp, pp: the stride of a dimension is the product of
  // the ones inside it.
  const int64_t tp_stride = 1, cp_stride = l.tp, dp_stride = l.tp * l.cp,
                pp_stride = dp_stride * l.dp;
  const double act = static_cast<double>(b) * s * h * o.bytes_per_activation;
  if (l.tp > 1) {
    // Two all-reduces forward and two backward per layer (Megatron), two
    // more when the forward pass is recomputed.
    const double per_layer = full_recompute ? 6 : 4;
    t.tp = layers_per_stage * m * per_layer *
           Coll(o, Collective::kAllReduce, act, topo.LevelsFor(l.tp, tp_stride));
  }
  if (l.cp > 1) {
    // This rank's keys and values for one layer and micro-batch.
    const double kv = static_cast<double>(b) * s * 2.0 *
                      static_cast<double>(shape.kv_heads * shape.head_dim()) *
                      o.bytes_per_activation / static_cast<double>(l.tp);
    const auto levels = topo.LevelsFor(l.cp, cp_stride);
    const double c = static_cast<double>(l.cp);
    if (l.cp_comm == workload::Layout::CpComm::kAllGather) {
      // Gathered whole before attention forward, the gradients
      // reduce-scattered after it backward: on the critical path (Llama 3).
      t.cp = layers_per_stage * m *
             (Coll(o, Collective::kAllGather, kv * c, levels) +
              Coll(o, Collective::kReduceScatter, kv * c, levels));
    } else {
      // A ring of cp - 1 steps: each passes a chunk of keys and values to the
      // next rank (backward: with their gradients, twice the bytes) while
      // attention runs on the chunk at hand. A step is as slow as its
      // slowest hop, and only a transfer longer than a chunk's attention
      // (one forward pass of it; backward, its backward) shows.
      const LinkLevel link = levels.back();
      const double chunks = layers_per_stage * m * c;
      const double chunk_forward = attention_forward_seconds / forward_passes / chunks;
      const double chunk_backward = attention_backward_seconds / chunks;
      const double send = link.latency + kv / link.bandwidth;
      const double send_back = link.latency + 2 * kv / link.bandwidth;
      t.cp = layers_per_stage * m * (c - 1) *
             (std::max(0.0, send - chunk_forward) + std::max(0.0, send_back - chunk_backward));
    }
  }
  if (l.pp > 1) {
    // One activation forward and one gradient backward per micro-batch
    // across each stage boundary, over the outermost link between stages.
    const LinkLevel link = topo.LevelsFor(2, pp_stride).back();
    t.pp = 2 * m * v * (link.latency + act / static_cast<double>(l.tp) / link.bandwidth);
  }
  if (shape.is_moe() && l.ep > 1) {
    // Dispatch and combine, forward and backward, per MoE layer.
    const double routed =
        act * static_cast<double>(shape.active_experts) / static_cast<double>(l.tp);
    t.ep = layers_per_stage * m * 4 *
           Coll(o, Collective::kAllToAll, routed, topo.LevelsFor(l.ep, dp_stride));
    // Overlap hides at most the expert compute the all-to-alls run beside.
    t.ep_exposed = t.ep - std::min(l.ep_overlap * t.ep, t.compute);
  }
  // Context-parallel ranks hold the same weights: gradients are reduced,
  // and ZeRO shards, over dp x cp ranks (contiguous in the rank order).
  if (l.dp * l.cp > 1) {
    const auto replicas = topo.LevelsFor(l.dp * l.cp, cp_stride);
    const workload::ParamCounts params = workload::CountParams(shape);
    const double local = static_cast<double>(params.total) / static_cast<double>(l.tp * l.pp);
    const double all_reduce =
        Coll(o, Collective::kAllReduce, local * o.bytes_per_gradient, replicas);
    const double per_micro_batch = (t.compute + t.memory) / m;
    if (l.zero_stage >= 3) {
      const FsdpTime f = FsdpMicroBatch(o, job, layers_per_stage, local, per_micro_batch, replicas);
      t.dp = m * f.comm;
      t.dp_exposed = o.overlap_dp ? m * f.exposed : t.dp;
    } else {
      // ZeRO-0/1/2: one reduction of the gradients per step (reduce-scatter +
      // all-gather is an all-reduce's traffic). They are complete only in the
      // last micro-batch's backward pass, which is all that can hide them.
      t.dp = all_reduce;
      const double hideable = o.overlap_dp ? (2.0 / 3.0) * per_micro_batch : 0;
      t.dp_exposed = std::max(0.0, t.dp - hideable);
    }
  }
  t.total = t.compute + t.memory + t.bubble + t.tp + t.cp + t.pp + t.ep_exposed + t.dp_exposed;

  workload::ActivationOptions a;
  a.micro_batch = b;
  a.recompute = job.train.recompute;
  a.flash_attention = job.train.flash_attention;
  a.sequence_parallel = l.tp > 1 && o.sequence_parallel && l.sequence_parallel;
  t.memory_per_accelerator = workload::PerAccelerator(shape, job.train.state, l, a).total();
  t.fits = accelerator.hbm_bytes <= 0 || t.memory_per_accelerator <= accelerator.hbm_bytes;
  t.tflops_per_accelerator = hardware_flops / t.total / static_cast<double>(world) / 1e12;
  t.mfu = model_flops / t.total / static_cast<double>(world) / peak;
  return t;
}

}  // namespace fmstack::sim
