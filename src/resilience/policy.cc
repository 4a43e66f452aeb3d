#include "resilience/policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

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
  const int64_t left = job.dp_active - std::max<int64_t>(1, fault.replicas_lost);
  const double after = static_cast<double>(left) / static_cast<double>(job.dp_full);
  if (left >= 1 && after + 1e-12 >= policy.min_dp_fraction) {
    a.restore = Restore::kNone;
    a.placement = Placement::kDropReplica;
    a.dp_after = left;
    a.reason = fault.replicas_lost > 1
                   ? fmt::format(
                         "elastic: no spare, continue with {} replicas fewer at the same "
                         "global batch",
                         fault.replicas_lost)
                   : "elastic: no spare, continue with one replica fewer at the same global batch";
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

double YoungDaly(double blocking_seconds, double mtti_seconds) {
  return std::sqrt(2.0 * blocking_seconds * mtti_seconds);
}

double DalyInterval(double blocking_seconds, double mtti_seconds) {
  const double c = blocking_seconds, m = mtti_seconds;
  if (m <= 0) return 0;
  if (c >= 2 * m) return m;
  const double r = c / (2 * m);
  return std::sqrt(2 * c * m) * (1 + std::sqrt(r) / 3 + r / 9) - c;
}

double CheckpointInterval(double blocking_seconds, double mtti_seconds, double drain_seconds) {
  return std::max(DalyInterval(blocking_seconds, mtti_seconds), drain_seconds);
}

double JobMtti(std::span<const catalog::FaultCause> causes, int64_t nodes,
               double job_mtti_seconds) {
  if (job_mtti_seconds > 0) return job_mtti_seconds;
  double rate = 0;
  for (const catalog::FaultCause& c : causes) rate += c.rate_per_node_hour;
  return rate > 0 && nodes > 0 ? 3600.0 / (rate * static_cast<double>(nodes)) : 0;
}

std::string_view EventName(EventKind k) {
  switch (k) {
    case EventKind::kCrash:
      return "crash";
    case EventKind::kHang:
      return "hang";
    case EventKind::kNonFinite:
      return "non-finite";
    case EventKind::kSilentCorruption:
      return "silent-corruption";
    case EventKind::kStraggler:
      return "straggler";
    case EventKind::kNodeLost:
      return "node-lost";
    case EventKind::kCheckpointFailed:
      return "checkpoint-failed";
    case EventKind::kNotice:
      return "notice";
    case EventKind::kSignal:
      return "signal";
    case EventKind::kSupervisorRestart:
      return "supervisor-restart";
    case EventKind::kPeerRestoreFailed:
      return "peer-restore-failed";
    case EventKind::kNodeUnhealthy:
      return "node-unhealthy";
  }
  return "?";
}

std::string_view VerbName(Verb v) {
  switch (v) {
    case Verb::kRestart:
      return "restart";
    case Verb::kSaveAndRestart:
      return "save and restart";
    case Verb::kSaveAndStop:
      return "save and stop";
    case Verb::kStop:
      return "stop";
    case Verb::kCarryOn:
      return "carry on";
  }
  return "?";
}

catalog::Recovery RecoveryOf(EventKind k) {
  switch (k) {
    case EventKind::kHang:
      return catalog::Recovery::kReboot;
    case EventKind::kNodeLost:
      return catalog::Recovery::kReplace;
    default:
      return catalog::Recovery::kRestart;
  }
}

catalog::Recovery RecoveryOf(const RuntimeEvent& e) {
  if (e.kind != EventKind::kNodeUnhealthy) return RecoveryOf(e.kind);
  switch (e.node_action) {
    case NodeAction::kReboot:
      return catalog::Recovery::kReboot;
    case NodeAction::kReplace:
    case NodeAction::kDrain:
      return catalog::Recovery::kReplace;
    case NodeAction::kNone:
      break;
  }
  return catalog::Recovery::kRestart;
}

std::string_view NodeActionName(NodeAction a) {
  switch (a) {
    case NodeAction::kNone:
      return "none";
    case NodeAction::kDrain:
      return "drain";
    case NodeAction::kReboot:
      return "reboot";
    case NodeAction::kReplace:
      return "replace";
  }
  return "?";
}

std::optional<NodeAction> ParseNodeAction(std::string_view name) {
  for (NodeAction a :
       {NodeAction::kNone, NodeAction::kDrain, NodeAction::kReboot, NodeAction::kReplace}) {
    if (NodeActionName(a) == name) return a;
  }
  return std::nullopt;
}

std::optional<EventKind> ParseEventName(std::string_view name) {
  for (int k = 0; k <= static_cast<int>(EventKind::kNodeUnhealthy); ++k) {
    if (EventName(static_cast<EventKind>(k)) == name) return static_cast<EventKind>(k);
  }
  return std::nullopt;
}

namespace {

double Backoff(const Policy& p, int restarts) {
  return std::min(p.backoff_max_seconds, p.backoff_seconds * std::pow(2.0, restarts));
}

// A drained node still trains correctly, so leaving it must cost nothing:
// save and move to a spare, or shrink around it (elastic: the peers hold
// its state); with neither, it keeps its ranks until the job ends, as a
// Slurm drain lets running jobs finish.
Decision DecideDrain(const Policy& policy, const JobView& job, const RunHistory& history,
                     int64_t replicas_per_node) {
  Decision d;
  if (history.restarts >= policy.max_restarts) {
    d.verb = Verb::kCarryOn;
    d.reason = fmt::format(
        "drain: the restart budget is spent ({} of {}; resilience.max_restarts), so the node "
        "keeps its ranks until the job ends",
        history.restarts, policy.max_restarts);
    return d;
  }
  const JobView shrunk{job.dp_full, job.dp_active - replicas_per_node + 1, job.spares_ready};
  d.action = OnMaintenance(policy, job.spares_ready > 0 ? job : shrunk);
  d.action.dp_after =
      job.dp_active - (d.action.placement == Placement::kDropReplica ? replicas_per_node : 0);
  switch (d.action.placement) {
    case Placement::kSpare:
      d.verb = Verb::kSaveAndRestart;
      d.reason = "drain: save the current step, then move the node's ranks to a spare";
      return d;
    case Placement::kDropReplica:
      d.verb = Verb::kRestart;
      d.reason = fmt::format(
          "drain, no spare: elastic shrink to {} replicas, their peers hold the node's state",
          d.action.dp_after);
      return d;
    default:
      d.verb = Verb::kCarryOn;
      d.reason =
          "drain, no spare and no room to shrink: the node keeps its ranks until the job ends or "
          "a spare is free";
      return d;
  }
}

}  // namespace

Decision Decide(const Policy& policy, const JobView& job, const RunHistory& history,
                const RuntimeEvent& event, int64_t replicas_per_node) {
  Decision d;
  const bool budget_left = history.restarts < policy.max_restarts;
  const std::string budget = fmt::format("restart {} of {} (resilience.max_restarts)",
                                         history.restarts + 1, policy.max_restarts);
  switch (event.kind) {
    case EventKind::kSignal:
      d.verb = Verb::kSaveAndStop;
      d.reason = "stopped by a signal: save the current step, then end the run";
      return d;
    case EventKind::kStraggler:
      // A straggler still trains correctly. Once restarts have not cured it
      // (a noisy neighbour, a slow host), a slow job beats a stopped one:
      // stopping would turn slowness into a failure.
      if (!budget_left) {
        d.verb = Verb::kCarryOn;
        d.reason = fmt::format(
            "straggler: the restart budget ({}) is spent and the job still trains correctly, "
            "only slower: carry on, and stop watching for stragglers in this run",
            policy.max_restarts);
        return d;
      }
      [[fallthrough]];
    case EventKind::kNotice:
      // The job is healthy now and will not be soon: nothing need be lost.
      d.action = OnMaintenance(policy, job);
      d.verb = budget_left ? Verb::kSaveAndRestart : Verb::kSaveAndStop;
      d.reason = fmt::format(
          "{}: save the current step, then {}", EventName(event.kind),
          budget_left ? "restart its node's ranks; " + budget
                      : fmt::format("stop: the restart budget ({}) is spent", policy.max_restarts));
      d.backoff_seconds = 0;
      return d;
    case EventKind::kNodeUnhealthy:
      if (event.node_action == NodeAction::kDrain)
        return DecideDrain(policy, job, history, replicas_per_node);
      if (event.node_action == NodeAction::kNone) {
        d.verb = Verb::kCarryOn;
        d.reason = "node-unhealthy: its check asks for no action";
        return d;
      }
      break;
    default:
      break;
  }
  if (event.kind == EventKind::kNonFinite && history.last_nonfinite_step == event.step) {
    d.verb = Verb::kStop;
    d.reason = fmt::format(
        "non-finite loss or gradient at step {} again after restoring: the job diverges "
        "(lower optim.lr or raise optim.warmup_steps)",
        event.step);
    return d;
  }
  const bool silent = event.kind == EventKind::kSilentCorruption;
  // A node to reboot or replace is out with every rank it carries.
  const catalog::Recovery recovery = RecoveryOf(event);
  d.action =
      OnFault(policy, job,
              {.recovery = recovery,
               .silent = silent,
               .replicas_lost = recovery == catalog::Recovery::kRestart ? 1 : replicas_per_node});
  if (silent) d.max_restore_step = std::max<int64_t>(event.verified_step, 0);
  if (d.action.restore == Restore::kPeers) {
    // Peers hold state, not health: they replace ranks that were lost. A
    // failed checkpoint tier or diverging numbers are not fixed by them,
    // and a peer restore that failed falls back to the checkpoint.
    const bool lost_ranks = event.kind == EventKind::kCrash || event.kind == EventKind::kHang ||
                            event.kind == EventKind::kNodeLost ||
                            event.kind == EventKind::kNodeUnhealthy;
    if (event.kind == EventKind::kPeerRestoreFailed) {
      d.action.restore = Restore::kCheckpoint;
      d.action.reason = "the peer copies could not serve: relaunch and load the newest checkpoint";
    } else if (!lost_ranks) {
      d.action.restore = Restore::kCheckpoint;
      d.action.reason = fmt::format(
          "no rank was lost, so peers cannot help with a {}: relaunch and load the newest "
          "checkpoint",
          EventName(event.kind));
    }
  }
  if (history.futile_restarts >= policy.max_futile_restarts) {
    d.verb = Verb::kStop;
    d.reason = fmt::format(
        "{}: the last {} restarts completed no step, so the fault outlives restarting (see the "
        "ranks' logs for what fails on start)",
        EventName(event.kind), history.futile_restarts);
    return d;
  }
  if (!budget_left) {
    d.verb = Verb::kStop;
    d.reason = policy.max_restarts == 0
                   ? fmt::format("{}: restarts are off (resilience.max_restarts = 0)",
                                 EventName(event.kind))
                   : fmt::format(
                         "{}: the restart budget is spent ({} of {} restarts used; "
                         "resilience.max_restarts)",
                         EventName(event.kind), history.restarts, policy.max_restarts);
    return d;
  }
  d.verb = Verb::kRestart;
  d.backoff_seconds = Backoff(policy, history.restarts);
  d.reason = fmt::format("{}: {}; {}", EventName(event.kind), d.action.reason, budget);
  return d;
}

}  // namespace fmstack::resilience
