// resilience: recovery policy as pure functions - what happened in, what to
// do out. `fmstack sim` plays the decisions out on a simulated cluster; the
// runtime supervisor acts on the same decisions for real. Neither decides
// on its own, so what the simulator predicts is what the runtime will do.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "catalog/catalog.h"

namespace fmstack::resilience {

enum class Strategy {
  kCheckpointRestart,  // every fault: relaunch the job, load the newest checkpoint
  kCheckpointless,     // the lost ranks' state comes from their data-parallel peers
  kElastic,            // drop the broken replica, go on with fewer, grow back later
};
std::string_view StrategyName(Strategy s);  // "checkpoint", "checkpointless", "elastic"
std::optional<Strategy> ParseStrategy(std::string_view name);

struct Policy {
  Strategy strategy = Strategy::kCheckpointRestart;
  double min_dp_fraction = 0.5;  // elastic: shrink no further than this share of replicas
};

// The job as the policy sees it when a fault is detected or a node frees up.
struct JobView {
  int64_t dp_full = 1;       // data-parallel replicas the job was launched with
  int64_t dp_active = 1;     // replicas training now
  int64_t spares_ready = 0;  // healthy idle nodes that can take a failed node's place
};

struct FaultView {
  catalog::Recovery recovery = catalog::Recovery::kReplace;
  bool silent = false;  // silent data corruption: every replica already holds the bad update
};

enum class Restore {
  kCheckpoint,  // newest valid checkpoint (older than the fault if silent)
  kPeers,       // from a surviving data-parallel replica's memory
  kNone,        // elastic shrink: survivors keep their state
};

enum class Placement {
  kSameNode,     // the process restarts where it was
  kSpare,        // a spare takes the failed node's place now
  kWaitForNode,  // no spare: wait until one is free or the node is back
  kDropReplica,  // elastic: continue without the failed node's replica
};

struct Action {
  Restore restore = Restore::kCheckpoint;
  Placement placement = Placement::kSameNode;
  bool restore_before_fault = false;  // silent corruption: skip checkpoints taken after it
  int64_t dp_after = 1;               // replicas training once the action completes
  std::string reason;                 // one line for the log: why this action
};

Action OnFault(const Policy& policy, const JobView& job, const FaultView& fault);

// Planned maintenance takes a node: save just before (nothing is lost), hand
// its work to a spare, shrink (elastic), or wait for the window to end.
Action OnMaintenance(const Policy& policy, const JobView& job);

// A node became free (a spare appeared, a repair finished) while the job
// runs short of `missing` replicas: whether to take it now and grow back.
bool ShouldGrow(const Policy& policy, const JobView& job);

// One copy of one checkpoint on one tier, as the restore sees it.
struct CheckpointCopy {
  int64_t step = 0;
  int tier = 0;            // 0 = fastest (node-local), increasing = slower
  bool committed = false;  // its COMMITTED marker exists
  bool valid = true;       // checksums verified (runtime) / taken before the fault (silent)
  bool reachable = true;   // the tier survived the fault (a replaced node's disk did not)
};

// The copy to restore: the newest step with a committed, valid, reachable
// copy, read from the fastest tier that holds it. nullopt: start over.
std::optional<size_t> ChooseRestore(std::span<const CheckpointCopy> copies);

// Checkpoint interval: Young/Daly sqrt(2 C M) for blocking save time C and
// mean time to interrupt M, but never shorter than the slowest tier's drain
// (the next save would queue behind it and the staging pool would grow).
double CheckpointInterval(double blocking_seconds, double mtti_seconds, double drain_seconds);

}  // namespace fmstack::resilience
