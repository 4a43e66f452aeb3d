// sim: one training job played out on a cluster with faults. The job trains,
// stalls for checkpoints, and on every fault the resilience policy decides;
// this engine only plays out the consequences (detection, waiting for a
// node, restart, lost work, shrinking) and books every second of wall time
// as training or as one kind of badput, so work + badput == wall exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "resilience/job_model.h"
#include "resilience/policy.h"

namespace fmstack::sim {

// One checkpoint tier as the job sees it, fastest first (resilience/job_model.h).
using TierModel = resilience::TierCost;

// Everything one run needs, in seconds and counts (see MakeScenario).
struct Scenario {
  int64_t job_nodes = 1, spare_nodes = 0;
  int64_t dp = 1;              // data-parallel replicas
  double step_seconds = 1;     // one optimizer step without faults
  double work_seconds = 0;     // failure-free training time to finish; 0 = run the horizon
  double horizon_seconds = 0;  // stop here at the latest
  double checkpoint_interval = 3600, checkpoint_blocking = 0;
  int64_t keep = 3;                  // newest checkpoints kept per tier
  double milestone_interval = 3600;  // and one per this long on the durable tiers (0 = none)
  std::vector<TierModel> tiers;
  bool local_replica = true;
  double restart_seconds = 300, peer_rebuild_seconds = 30, peer_restore_seconds = 0;
  resilience::Policy policy;
  std::vector<catalog::FaultCause> causes;
  double planned_per_node_hour = 0;
  double price_per_node_hour = 0;
  bool record_timeline = false;
};

struct Badput {
  double lost_work = 0;    // trained, then rolled back to a restore point
  double detection = 0;    // fault -> the job knows
  double restart = 0;      // relaunch, load or rebuild state
  double checkpoint = 0;   // blocking part of saves
  double waiting = 0;      // no node to run on (no spare)
  double degraded = 0;     // elastic: replicas missing
  double maintenance = 0;  // planned interruptions

  double total() const {
    return lost_work + detection + restart + checkpoint + waiting + degraded + maintenance;
  }
};

struct TimelinePoint {
  double time = 0, work = 0;
};
struct FaultMark {
  double time = 0;
  int cause = 0;  // index into Scenario::causes, or kPlannedCause
};

struct RunResult {
  double wall = 0;  // seconds simulated
  double work = 0;  // failure-free training seconds kept at the end
  bool finished = false;
  Badput badput;
  int64_t interruptions = 0, planned = 0;
  std::vector<int64_t> by_cause;  // unexpected interruptions per cause
  int64_t spare_swaps = 0, waits = 0, shrinks = 0, grows = 0, restores_from_checkpoint = 0,
          restores_from_peers = 0, checkpoints = 0,
          from_scratch = 0;  // restores that found no valid checkpoint at all
  double cost = 0;           // (job + spare nodes) x price x wall
  std::vector<TimelinePoint> timeline;
  std::vector<FaultMark> marks;

  double ettr() const { return wall > 0 ? work / wall : 0; }
};

// Deterministic: the same scenario and seed give the same result.
RunResult Simulate(const Scenario& scenario, uint64_t seed);

}  // namespace fmstack::sim
