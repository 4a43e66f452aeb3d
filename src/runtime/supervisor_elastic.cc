// The supervisor's elastic data parallelism (resilience.policy = "elastic").
// A node lost with no spare to take its place is dropped: its ranks are
// killed and the survivors form a smaller group of the next generation,
// numbered node-major without it, where they re-partition their ZeRO
// shards from the peers' copies and keep the global batch (each rank runs
// more micro-batches). When a slot is free again (a spare, or the lost node
// repaired after resilience.node_repair), the policy's ShouldGrow says
// whether to take it: the dropped node's ranks start there as newcomers and
// the group grows back to its size, in memory as well.
#include <fmt/format.h>
#include <signal.h>

#include <algorithm>

#include "runtime/supervisor_impl.h"

namespace fmstack::runtime::internal {

int Supervisor::GroupRank(int rank) const {
  const int per_node = o_.layout.procs_per_node, node = rank / per_node;
  if (dropped_[node]) return -1;
  const auto before = std::count(dropped_.begin(), dropped_.begin() + node, false);
  return static_cast<int>(before) * per_node + rank % per_node;
}

int Supervisor::Lead() const {
  for (int n = 0; n < o_.layout.nodes; ++n) {
    if (!dropped_[n]) return n * o_.layout.procs_per_node;
  }
  return 0;
}

void Supervisor::SendRejoin(const std::vector<int>& except) {
  for (int r = 0; r < o_.layout.world(); ++r) {
    if (Dropped(r) || std::find(except.begin(), except.end(), r) != except.end()) continue;
    if (control_fd_[r] >= 0 && alive_[r]) {
      SendLine(control_fd_[r], {{"cmd", "rejoin"},
                                {"generation", env_.generation},
                                {"world", ActiveWorld()},
                                {"rank", GroupRank(r)}});
    }
  }
}

void Supervisor::OutOfService(int slot) {
  if (OnSlurm()) {
    // The host leaves the allocation for good: a node Slurm finds down
    // later would end the whole job while it is still in it.
    released_.insert(slot);
    std::vector<std::string> keep;
    for (size_t s = 0; s < o_.slurm.hosts.size(); ++s) {
      if (!released_.contains(static_cast<int>(s))) keep.push_back(o_.slurm.hosts[s].name);
    }
    const std::string name = o_.slurm.hosts.at(static_cast<size_t>(slot)).name;
    try {
      cluster::ShrinkAllocation(o_.slurm, keep, 10);
      Note(fmt::format("slurm: {} released from job {}", name, o_.slurm.job_id));
    } catch (const std::exception& e) {
      Note(fmt::format("slurm: {} stays in job {}: {}", name, o_.slurm.job_id, e.what()));
    }
    return;
  }
  if (o_.node_repair_seconds <= 0) return;
  repairs_[slot] =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o_.node_repair_seconds * 1e3));
}

bool Supervisor::BeginShrink(const Seen& seen) {
  if (seen.event.rank < 0) return false;
  const int node = seen.event.rank / o_.layout.procs_per_node;
  if (dropped_[node] || ActiveNodes() < 2) return false;
  const int from_world = ActiveWorld();
  const std::vector<int> lost = RanksOf(node);
  LoseRanks(lost, seen, /*replace=*/false);
  for (const int r : lost) monitor_->Retire(r);
  dropped_[node] = true;
  OutOfService(slot_[node]);
  Note(fmt::format(
      "elastic: node {} dropped{}: {} -> {} data-parallel ranks in generation {}, the global "
      "batch kept",
      node,
      o_.node_repair_seconds > 0
          ? fmt::format(" (slot {} back in {:.0f} s)", slot_[node], o_.node_repair_seconds)
          : "",
      from_world, ActiveWorld(), env_.generation));
  SendRejoin(lost);
  return true;
}

void Supervisor::RepairNodes() {
  const auto now = Clock::now();
  for (auto it = repairs_.begin(); it != repairs_.end();) {
    if (now < it->second) {
      ++it;
      continue;
    }
    const int slot = it->first;
    it = repairs_.erase(it);
    if (!health_.empty()) {  // health decides: a drained slot waits for an operator
      if (health_[slot].admin != "drain" || !health_[slot].repair.empty()) NodeRepaired(slot);
      continue;
    }
    if (network_) network_->SetLink(slot, true);
    spares_.push_back(slot);
    Note(fmt::format("slot {} repaired: back in the pool of free slots ({} free)", slot,
                     spares_.size()));
  }
}

void Supervisor::MaybeGrow() {
  if (decision_ || rejoin_ || running_ == 0 || term_at_ != Clock::time_point::max()) return;
  const auto missing = std::find(dropped_.begin(), dropped_.end(), true);
  if (missing == dropped_.end()) return;
  if (!resilience::ShouldGrow(o_.policy, {.dp_full = o_.layout.world(),
                                          .dp_active = ActiveWorld(),
                                          .spares_ready = static_cast<int64_t>(spares_.size())}))
    return;
  const int node = static_cast<int>(missing - dropped_.begin());
  if (!MoveToSpare(node)) return;
  const int from_world = ActiveWorld();
  dropped_[node] = false;
  const std::vector<int> ranks = RanksOf(node);
  const auto now = Clock::now();
  detected_at_ = relaunch_at_ = now;
  fired_at_.reset();
  restored_ = false;
  resilience::Decision d;
  d.action.restore = resilience::Restore::kPeers;
  d.action.placement = resilience::Placement::kSpare;
  d.reason = "elastic: a node is free and the job runs short: grow back";
  decision_ = d;
  ++env_.generation;
  const std::string what = fmt::format("node {} back on slot {}: {} -> {} data-parallel ranks",
                                       node, slot_[node], from_world, ActiveWorld());
  result_.ledger.incidents().push_back({.kind = "grow",
                                        .step = monitor_->MaxStep(),
                                        .at = RunSeconds(now),
                                        .decision = "grow: " + d.reason,
                                        .what = what});
  recovering_ = result_.ledger.incidents().size() - 1;
  MetricsOnIncident("grow");
  rejoin_ = Rejoin{ranks, now, now, /*spawn=*/true, from_world, /*counted=*/false};
  Note(fmt::format("elastic: {} in generation {}", what, env_.generation));
  SendRejoin(ranks);
  SaveState();
}

}  // namespace fmstack::runtime::internal
