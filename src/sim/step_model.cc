#include "sim/step_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/error.h"
#include "workload/memory.h"
#include "workload/shape.h"

namespace fmstack::sim {
namespace {

double AllReduce(double bytes, const std::vector<LinkLevel>& levels) {
  return HierarchicalTime(Collective::kAllReduce, bytes, levels);
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
  t.compute = hardware_flops / static_cast<double>(world) / (peak * o.compute_efficiency);
  // Interleaving v model chunks per rank divides the bubble by v (Megatron-LM).
  const double v = static_cast<double>(std::max<int64_t>(1, l.virtual_stages));
  t.bubble = t.compute * static_cast<double>(l.pp - 1) / (m * v);

  // Rank order tp, cp, dp, pp: the stride of a dimension is the product of
  // the ones inside it.
  const int64_t tp_stride = 1, cp_stride = l.tp, dp_stride = l.tp * l.cp,
                pp_stride = dp_stride * l.dp;
  const double act = static_cast<double>(b) * s * h * o.bytes_per_activation;
  if (l.tp > 1) {
    // Two all-reduces forward and two backward per layer (Megatron), two
    // more when the forward pass is recomputed.
    const double per_layer = full_recompute ? 6 : 4;
    t.tp = layers_per_stage * m * per_layer * AllReduce(act, topo.LevelsFor(l.tp, tp_stride));
  }
  if (l.cp > 1) {
    // Keys and values all-gathered forward, their gradients reduce-scattered backward.
    const double kv = static_cast<double>(b) * s * 2.0 *
                      static_cast<double>(shape.kv_heads * shape.head_dim()) *
                      o.bytes_per_activation / static_cast<double>(l.tp);
    const auto levels = topo.LevelsFor(l.cp, cp_stride);
    t.cp = layers_per_stage * m *
           (HierarchicalTime(Collective::kAllGather, kv * static_cast<double>(l.cp), levels) +
            HierarchicalTime(Collective::kReduceScatter, kv * static_cast<double>(l.cp), levels));
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
           HierarchicalTime(Collective::kAllToAll, routed, topo.LevelsFor(l.ep, dp_stride));
  }
  if (l.dp > 1) {
    const workload::ParamCounts params = workload::CountParams(shape);
    const double local = static_cast<double>(params.total) / static_cast<double>(l.tp * l.pp);
    // ZeRO-1/2: reduce-scatter + all-gather, an all-reduce's traffic; ZeRO-3
    // gathers the parameters once more for the backward pass.
    const double factor = l.zero_stage >= 3 ? 1.5 : 1.0;
    t.dp = factor * AllReduce(local * o.bytes_per_gradient, topo.LevelsFor(l.dp, dp_stride));
    // Gradients are complete only in the last micro-batch's backward pass,
    // which is all that can hide their reduction.
    const double hideable = o.overlap_dp ? (2.0 / 3.0) * t.compute / m : 0;
    t.dp_exposed = std::max(0.0, t.dp - hideable);
  }
  t.total = t.compute + t.bubble + t.tp + t.cp + t.pp + t.ep + t.dp_exposed;

  workload::ActivationOptions a;
  a.micro_batch = b;
  a.recompute = job.train.recompute;
  a.flash_attention = job.train.flash_attention;
  a.sequence_parallel = l.tp > 1;
  t.memory_per_accelerator = workload::PerAccelerator(shape, job.train.state, l, a).total();
  t.fits = accelerator.hbm_bytes <= 0 || t.memory_per_accelerator <= accelerator.hbm_bytes;
  t.tflops_per_accelerator = hardware_flops / t.total / static_cast<double>(world) / 1e12;
  t.mfu = model_flops / t.total / static_cast<double>(world) / peak;
  return t;
}

}  // namespace fmstack::sim
