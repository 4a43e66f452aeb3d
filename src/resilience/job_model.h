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

// How long a planned maintenance window keeps a node away.
inline constexpr double kPlannedOutOfService = 3600;

// A job's nodes away at any moment (rebooting, in repair, in maintenance),
// on average: by Little's law, nodes x each cause's rate x how long a node
// it takes stays away. The count away is Poisson with that mean, which says
// how often it exceeds the spares: then a job that cannot shrink waits.
struct NodesAway {
  double mean = 0;
  double beyond_spares = 0;  // share of the time more nodes are away than there are spares
  int64_t spares_99 = 0;     // the fewest spares that cover 99% of the time
};
NodesAway NodesOutOfService(const FaultLoad& load, int64_t nodes, int64_t spares);
// The warning sim prints when the spares fall short 10% of the time or more
// (plan shows the figures in its checkpoint table); empty when they do not.
std::string SparesWarning(const NodesAway& away, int64_t spares);

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
