// resilience: what plan, sim and the runtime all derive from a job file
// about its faults and its checkpoints, computed once here so that the
// three never disagree on a job's MTTI, its blocking save or its interval.
#pragma once

#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "spec/job_spec.h"

namespace fmstack::resilience {

// The faults a job meets: `faults.set` (the llama3-405b set when the job
// names none), or one node cause from `cluster.node_mtbf`, plus the job's
// own causes, times `faults.scale`. When `cluster.job_mtti` is set, the
// unexpected causes are rescaled so that their sum gives exactly that MTTI
// (their mix is kept).
struct FaultLoad {
  std::vector<catalog::FaultCause> causes;
  double planned_per_node_hour = 0;
  std::string source;  // where the rates came from, for output
  double mtti = 0;     // job MTTI of the unexpected causes, seconds; 0 = no faults
};
FaultLoad ResolveFaultLoad(const spec::JobSpec& job, const catalog::Catalog& catalog);

// One checkpoint tier as the job sees it, fastest first.
struct TierCost {
  std::string name;
  double write_seconds = 0;  // host snapshot -> committed on this tier
  double read_seconds = 0;   // restore from this tier
  bool node_local = false;   // lost with a replaced node (unless replicated to a peer)
};

struct CheckpointCost {
  double bytes = 0;             // weights, master copy and optimizer state, whole job
  double blocking_seconds = 0;  // each accelerator's share into host memory, all in parallel
  std::vector<TierCost> tiers;
  double drain_seconds = 0;  // the slowest tier's write: no save starts before it ends
  double interval_seconds = 0;
  std::string interval_rule;
};
// Needs the job's [cluster]. `mtti` is the FaultLoad's.
CheckpointCost ModelCheckpoints(const spec::JobSpec& job, const catalog::Catalog& catalog,
                                double mtti);

}  // namespace fmstack::resilience
