// plan: `fmstack plan` — sizes a job: memory per accelerator and which
// hardware fits it, compute and time at a target MFU, cost, checkpoint size,
// interval and bandwidth, storage and quota. Pure computation over the spec
// and the catalog; runs in microseconds.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "resilience/job_model.h"
#include "spec/job_spec.h"
#include "workload/memory.h"
#include "workload/shape.h"

namespace fmstack::plan {

struct PlanOptions {
  double deadline_days = 30;  // "how many accelerators to finish in D days"
  double observed_hours = 0;  // if > 0: accelerator-hours a real run took -> implied MFU
};

// Per catalog accelerator: how many it takes to hold the training state.
struct FitRow {
  std::string accelerator;
  double hbm_bytes = 0;
  int64_t min_for_state = 0;  // ceil(state / HBM): the seeds' "7 H100" figure
  double peak_flops = 0;      // at the job's precision; 0 = unsupported
  double hours = 0;           // accelerator-hours at the target MFU; 0 if unsupported
};

struct MemoryPlan {
  workload::StateBytes bytes;
  workload::MemoryBreakdown whole;                           // unsharded training state
  std::optional<workload::MemoryBreakdown> per_accelerator;  // with the job's layout
  double hbm_bytes = 0;                                      // of the cluster's accelerator
  std::vector<FitRow> fits;
};

struct ComputePlan {
  double tokens = 0;
  bool tokens_from_steps = false;           // train.tokens unset: steps x global_batch x seq_len
  double flops_6n = 0, flops_detailed = 0;  // whole training run
  std::string flop_count = "6N";            // which count hours and MFU use
  double peak_flops = 0;                    // cluster accelerator at job precision
  double target_mfu = 0;
  double accelerator_hours = 0;
  double wall_seconds = 0;  // on the cluster
  int64_t accelerators_for_deadline = 0;
  double deadline_days = 0;
  double observed_hours = 0;
  double implied_mfu_6n = 0, implied_mfu_detailed = 0;  // from observed_hours
};

struct CostPlan {
  double price_per_hour = 0;  // per instance; 0 = unknown
  double instance_hours = 0;
  double on_demand = 0;
  double blended = 0;  // with the cluster's spot fraction
  double per_month_on_demand = 0;
};

// The same figures `fmstack sim` and the runtime use (resilience/job_model.h),
// plus the seeds' sizing rules beside them.
struct CheckpointPlan {
  double bytes = 0;
  double save_seconds = 0;                  // blocking: the snapshot into host memory
  std::vector<resilience::TierCost> tiers;  // each tier's write and read, fastest first
  double drain_seconds = 0;                 // the slowest tier's write
  double mtti = 0;                          // job MTTI of unexpected faults; 0 = none
  std::string mtti_source;
  double interval_tenth_mtti = 0, interval_young_daly = 0, interval = 0;
  std::string interval_rule;
  double overhead = 0;  // expected share of time lost at `interval`
  double bandwidth_blocking = 0, bandwidth_async = 0;
  resilience::NodesAway nodes_away;  // nodes in repair or maintenance at once, and spares for it
};

struct StoragePlan {
  double data_bytes = 0;
  int64_t generations = 0;
  double total_bytes = 0;
  double shared_capacity = 0;  // configured; 0 = not sized
  double monthly_cost = 0;     // shared tier price x total
};

struct Plan {
  std::string job, model;
  workload::TransformerShape shape;
  workload::ParamCounts params;
  workload::TrainingFlops flops_per_token;
  workload::Layout layout;
  std::optional<spec::ClusterSpec> cluster;
  MemoryPlan memory;
  ComputePlan compute;
  CostPlan cost;
  CheckpointPlan checkpoint;
  StoragePlan storage;
  int64_t vcpus = 0;
  // Whether the layout's per-accelerator memory fits the cluster's HBM;
  // unknown (nullopt) without a cluster. `fit_reason` says why not.
  std::optional<bool> fits;
  std::string fit_reason;
  std::vector<std::string> warnings;
};

Plan MakePlan(const spec::JobSpec& job, const catalog::Catalog& catalog,
              const PlanOptions& options);

}  // namespace fmstack::plan
