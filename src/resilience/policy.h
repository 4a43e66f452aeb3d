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
  // A real run (runtime/) restarts at most this often, waiting backoff x 2^k
  // (at most backoff_max) before restart k; the simulator has no budget.
  int max_restarts = 3;
  double backoff_seconds = 1;
  double backoff_max_seconds = 60;
  // Restarts in a row that complete no step before the run stops: a fault
  // that survives every restart (every checkpoint unreadable, a broken
  // program) must not spend the whole budget.
  int max_futile_restarts = 3;
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
  // Replicas the fault takes: one in the simulator (a replica spans whole
  // nodes); a runtime node carrying several data-parallel ranks loses them all.
  int64_t replicas_lost = 1;
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

// Young/Daly first-order optimum sqrt(2 C M): blocking save time C, MTTI M.
double YoungDaly(double blocking_seconds, double mtti_seconds);

// Daly's higher-order optimum (Daly 2006, eq. 37): for C < 2M,
// sqrt(2CM) [1 + sqrt(C/2M)/3 + (C/2M)/9] - C, else M. It corrects
// Young/Daly where the save is not small against the MTTI (C/M -> 0: equal).
double DalyInterval(double blocking_seconds, double mtti_seconds);

// Checkpoint interval: Daly's optimum for blocking save time C and mean time
// to interrupt M, but never shorter than the slowest tier's drain (the next
// save would queue behind it and the staging pool would grow). 0 when M is
// unknown.
double CheckpointInterval(double blocking_seconds, double mtti_seconds, double drain_seconds);

// Mean time to interrupt of a job on `nodes` nodes whose causes fail each
// node at their hourly rates; `job_mtti_seconds` > 0 (the cluster's own
// figure) wins. 0 = nothing fails.
double JobMtti(std::span<const catalog::FaultCause> causes, int64_t nodes, double job_mtti_seconds);

// ---------------------------------------------------------------- runtime --
// What the supervisor of a real run saw. Each kind maps onto a FaultView for
// OnFault (or onto OnMaintenance when the job can save first).
enum class EventKind {
  kCrash,              // a worker died (signal) or exited with an error
  kHang,               // a worker stopped sending heartbeats
  kNonFinite,          // NaN/Inf loss or gradient
  kSilentCorruption,   // replicas disagree on the parameters (bit flip)
  kStraggler,          // one rank persistently slower than its peers
  kNodeLost,           // a node left the network
  kCheckpointFailed,   // the fast checkpoint tier failed (disk full, I/O error)
  kNotice,             // the node will be taken (spot notice, maintenance): save first
  kSignal,             // SIGINT/SIGTERM to the supervisor: save and stop
  kSupervisorRestart,  // the supervisor itself restarted
  kPeerRestoreFailed,  // checkpointless recovery found no usable peer copy
  kNodeUnhealthy,      // a node's health check failed (Xid, ECC, NIC, disk...)
};
std::string_view EventName(EventKind k);
std::optional<EventKind> ParseEventName(std::string_view name);
// How the node of a faulty rank comes back: a process fault restarts in
// place; a silent node (hang) is rebooted; a node off the network replaced.
catalog::Recovery RecoveryOf(EventKind k);

// What a failed health check asks for its node (the check table's action).
// A drained node still works: the job leaves it when it can do so without
// loss. A node to reboot or replace is broken now: its ranks are lost.
enum class NodeAction { kNone, kDrain, kReboot, kReplace };
std::string_view NodeActionName(NodeAction a);  // "none", "drain", "reboot", "replace"
std::optional<NodeAction> ParseNodeAction(std::string_view name);

struct RuntimeEvent {
  EventKind kind = EventKind::kCrash;
  int rank = -1;     // the rank to blame, -1 when not known
  int64_t step = 0;  // the newest step any rank completed when it happened
  // Silent corruption: the newest step whose replicas were checked equal.
  int64_t verified_step = -1;
  // kNodeUnhealthy: what the failed check asks for the blamed rank's node.
  NodeAction node_action = NodeAction::kNone;
};
// RecoveryOf(kind), or for an unhealthy node what its check asks for.
catalog::Recovery RecoveryOf(const RuntimeEvent& e);

// What happened before, as far as the decision needs it.
struct RunHistory {
  int restarts = 0;                  // restarts done in this run so far
  int futile_restarts = 0;           // of those, the latest in a row with no step completed
  int64_t last_nonfinite_step = -1;  // step of the previous NaN/Inf, -1 = none
};

enum class Verb {
  kRestart,         // stop every worker now, start them again, restore
  kSaveAndRestart,  // emergency checkpoint of the current step first, then restart
  kSaveAndStop,     // emergency checkpoint, then end the run (interrupted)
  kStop,            // end the run now: failed
  kCarryOn,         // nothing to do now (a drained node keeps its ranks until it can leave)
};
std::string_view VerbName(Verb v);

struct Decision {
  Verb verb = Verb::kRestart;
  Action action;                  // restore and placement for the restart
  double backoff_seconds = 0;     // wait this long before the restart
  int64_t max_restore_step = -1;  // restore no newer step than this; -1 = newest
  std::string reason;             // one line: why
};

// The one decision point of a real run.
// `replicas_per_node`: the data-parallel ranks one node carries, all out
// while it is rebooted or replaced (JobView counts ranks in the runtime).
Decision Decide(const Policy& policy, const JobView& job, const RunHistory& history,
                const RuntimeEvent& event, int64_t replicas_per_node = 1);

}  // namespace fmstack::resilience
