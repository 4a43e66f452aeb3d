#include "resilience/policy.h"

#include <algorithm>
#include <cmath>

#include "plan/sizing.h"

namespace fmstack::resilience {

std::string_view StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kCheckpointRestart:
      return "checkpoint";
    case Strategy::kCheckpointless:
      return "checkpointless";
    case Strategy::kElastic:
      return "elastic";
  }
  return "?";
}

std::optional<Strategy> ParseStrategy(std::string_view name) {
  for (Strategy s : {Strategy::kCheckpointRestart, Strategy::kCheckpointless, Strategy::kElastic}) {
    if (StrategyName(s) == name) return s;
  }
  return std::nullopt;
}

namespace {

// Where the failed node's work continues when the job stays whole.
Placement PlaceWhole(const JobView& job, const FaultView& fault) {
  if (fault.recovery == catalog::Recovery::kRestart) return Placement::kSameNode;
  return job.spares_ready > 0 ? Placement::kSpare : Placement::kWaitForNode;
}

}  // namespace

Action OnFault(const Policy& policy, const JobView& job, const FaultView& fault) {
  Action a;
  a.placement = PlaceWhole(job, fault);
  a.dp_after = job.dp_active;
  if (fault.silent) {
    // The corrupted update was all-reduced into every replica: no peer holds
    // good state, and neither does any checkpoint taken after the fault.
    a.restore = Restore::kCheckpoint;
    a.restore_before_fault = true;
    a.reason = "silent data corruption reached every replica: restore a checkpoint from before it";
    return a;
  }
  const bool has_peer = job.dp_active >= 2;
  switch (policy.strategy) {
    case Strategy::kCheckpointRestart:
      a.restore = Restore::kCheckpoint;
      a.reason = "checkpoint-restart: relaunch and load the newest checkpoint";
      return a;
    case Strategy::kCheckpointless:
      a.restore = has_peer ? Restore::kPeers : Restore::kCheckpoint;
      a.reason = has_peer ? "checkpointless: rebuild the lost ranks from a data-parallel peer"
                          : "checkpointless without a second replica: load the newest checkpoint";
      return a;
    case Strategy::kElastic:
      break;
  }
  if (!has_peer) {
    a.restore = Restore::kCheckpoint;
    a.reason = "elastic with one replica: nothing to shrink to, load the newest checkpoint";
    return a;
  }
  a.restore = Restore::kPeers;
  if (a.placement != Placement::kWaitForNode) {
    a.reason = "elastic: a node is at hand, rebuild the lost ranks from a peer";
    return a;
  }
  const double after = static_cast<double>(job.dp_active - 1) / static_cast<double>(job.dp_full);
  if (after + 1e-12 >= policy.min_dp_fraction) {
    a.restore = Restore::kNone;
    a.placement = Placement::kDropReplica;
    a.dp_after = job.dp_active - 1;
    a.reason = "elastic: no spare, continue with one replica fewer at the same global batch";
    return a;
  }
  a.reason = "elastic at its minimum replica count: wait for a node";
  return a;
}

Action OnMaintenance(const Policy& policy, const JobView& job) {
  Action a;
  a.dp_after = job.dp_active;
  const bool peers = policy.strategy != Strategy::kCheckpointRestart && job.dp_active >= 2;
  a.restore = peers ? Restore::kPeers : Restore::kCheckpoint;
  if (job.spares_ready > 0) {
    a.placement = Placement::kSpare;
    a.reason = "maintenance: save, move the node's ranks to a spare";
    return a;
  }
  const double after = static_cast<double>(job.dp_active - 1) / static_cast<double>(job.dp_full);
  if (policy.strategy == Strategy::kElastic && job.dp_active >= 2 &&
      after + 1e-12 >= policy.min_dp_fraction) {
    a.restore = Restore::kNone;
    a.placement = Placement::kDropReplica;
    a.dp_after = job.dp_active - 1;
    a.reason = "maintenance, no spare: elastic shrink until the window ends";
    return a;
  }
  a.placement = Placement::kWaitForNode;
  a.reason = "maintenance, no spare: wait for the window to end";
  return a;
}

bool ShouldGrow(const Policy& policy, const JobView& job) {
  return policy.strategy == Strategy::kElastic && job.dp_active < job.dp_full &&
         job.spares_ready > 0;
}

std::optional<size_t> ChooseRestore(std::span<const CheckpointCopy> copies) {
  std::optional<size_t> best;
  for (size_t i = 0; i < copies.size(); ++i) {
    const CheckpointCopy& c = copies[i];
    if (!c.committed || !c.valid || !c.reachable) continue;
    if (!best || c.step > copies[*best].step ||
        (c.step == copies[*best].step && c.tier < copies[*best].tier)) {
      best = i;
    }
  }
  return best;
}

double CheckpointInterval(double blocking_seconds, double mtti_seconds, double drain_seconds) {
  const double young_daly =
      mtti_seconds > 0 ? plan::IntervalYoungDaly(blocking_seconds, mtti_seconds) : 0.0;
  return std::max(young_daly, drain_seconds);
}

}  // namespace fmstack::resilience
