// sim: the time of one optimizer step of 3D/4D-parallel training on a
// topology. Compute is the job's FLOPs at a kernel efficiency; every
// parallel dimension adds the collectives it needs on the links it crosses
// (rank order tp, cp, dp (with ep inside), pp, as Megatron-LM lays ranks
// out); the 1F1B pipeline adds its bubble; data-parallel gradient traffic
// overlaps the backward pass. Memory feasibility reuses workload/.
#pragma once

#include "catalog/catalog.h"
#include "sim/busbw.h"
#include "sim/topology.h"
#include "spec/job_spec.h"

namespace fmstack::sim {

struct StepOptions {
  // Achieved / peak dense matmul FLOP/s: the one constant chosen on published
  // runs. It is sim::CalibrateEfficiency on Megatron-LM's Table 1 (laid out
  // as Megatron-LM's own scripts ran it), rounded to 0.01;
  // tests/validation/megatron_table1_test.cc keeps the two together.
  double compute_efficiency = 0.64;
  double memory_efficiency = 0.8;  // achieved / peak HBM bandwidth of elementwise kernels
  // Norms and dropout split over TP ranks (Korthikanti et al. 2022); Megatron-LM
  // before 2022 repeated them on every TP rank.
  bool sequence_parallel = true;
  bool overlap_dp = true;  // gradient reduction hidden behind backward
  // ZeRO-3: of the shorter of a layer's compute and the collectives beside
  // it, the share that is hidden (NCCL's kernels take SMs from the compute;
  // an assumption, not a measurement).
  double fsdp_overlap = 0.7;
  double bytes_per_activation = 2;  // bf16 activations on the wire
  double bytes_per_gradient = 2;    // bf16 gradient reduction
  // Measured busbw curves for groups that cross the network (nullptr: the
  // analytic alpha-beta model). Not owned.
  const MeasuredBusbw* measured = nullptr;
};

struct StepTime {
  double compute = 0;     // this rank's share of the matmul FLOPs
  double memory = 0;      // memory-bound kernels: norms, activations, softmax, dropout
  double bubble = 0;      // 1F1B: (pp - 1) / (micro-batches x virtual stages) x compute
  double tp = 0;          // tensor-parallel all-reduces (not overlapped)
  double cp = 0;          // context-parallel K, V exchange not hidden by attention
  double pp = 0;          // point-to-point activations between stages
  double ep = 0;          // MoE all-to-alls, whole
  double ep_exposed = 0;  // the part not hidden behind expert compute (parallel.ep_overlap)
  double dp = 0;          // gradient reduction, whole
  double dp_exposed = 0;  // the part not hidden behind backward
  double total = 0;
  int64_t micro_batches = 0;          // per pipeline, per step
  double memory_per_accelerator = 0;  // bytes, most loaded rank
  bool fits = true;                   // within the accelerator's HBM
  double tflops_per_accelerator = 0;  // model FLOPs achieved, Megatron's Table 1 unit
  double mfu = 0;
};

// Throws SpecError (via the job's positions) when the layout does not tile
// the topology or the batch does not split into micro-batches.
StepTime ModelStep(const spec::JobSpec& job, const Topology& topology,
                   const catalog::Accelerator& accelerator, const StepOptions& options = {});

}  // namespace fmstack::sim
