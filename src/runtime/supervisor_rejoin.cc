// The supervisor's checkpointless recovery: the lost ranks are replaced in
// place while the survivors keep their processes and their memory. The
// survivors are told at once (their pending collectives abort, instead of
// waiting for a timeout on a peer that cannot answer); the replacements
// start once the lost processes are gone, and every rank meets in a new
// generation of the communicator, where the peers' copies are restored
// (train/peer_replica.h). When that fails, the workers report it and the
// policy falls back to a full restart from the newest checkpoint.
#include <fmt/format.h>
#include <signal.h>

#include <algorithm>

#include "runtime/supervisor_impl.h"

namespace fmstack::runtime::internal {

void Supervisor::LoseRanks(const std::vector<int>& lost, const Seen& seen, bool replace) {
  for (const int r : lost) {
    if (alive_[r]) SignalRank(r, SIGKILL);
  }
  // Survivors whose collectives fail ask the store whom they lost (a crash
  // has said so already; a hang or a lost node has not).
  store_->Set(comm::FailureKey(env_.generation), fmt::format("{} {}", lost.front(), seen.what));
  ++history_.restarts;
  ++env_.generation;
  const auto now = Clock::now();
  const auto backoff =
      std::chrono::milliseconds(static_cast<int64_t>(decision_->backoff_seconds * 1e3));
  rejoin_ = Rejoin{lost, now + backoff, now + std::chrono::seconds(10), replace};
  relaunch_at_ = detected_at_;
  restored_ = false;
}

bool Supervisor::BeginRejoin(const Seen& seen, bool moved_to_spare) {
  if (seen.event.rank < 0 || o_.layout.world() < 2) return false;
  const int node = seen.event.rank / o_.layout.procs_per_node;
  const std::vector<int> lost =
      moved_to_spare || seen.event.kind == resilience::EventKind::kNodeLost
          ? RanksOf(node)
          : std::vector<int>{seen.event.rank};
  if (static_cast<int>(lost.size()) >= ActiveWorld()) return false;  // nobody survives
  LoseRanks(lost, seen, /*replace=*/true);
  std::string names;
  for (const int r : lost) names += fmt::format("{}{}", names.empty() ? "" : ", ", r);
  Note(fmt::format(
      "checkpointless: replacing rank(s) {}{}; the other ranks keep their processes "
      "and meet them in generation {}",
      names, moved_to_spare ? fmt::format(" on spare slot {}", slot_[node]) : "", env_.generation));
  // Survivors abort what they wait on now and wait for the replacements in
  // the new generation's rendezvous.
  SendRejoin(lost);
  return true;
}

void Supervisor::AdvanceRejoin() {
  const auto now = Clock::now();
  for (const int r : rejoin_->ranks) {
    if (!alive_[r]) continue;
    if (now < rejoin_->gone_by) return;
    return AbandonRejoin(fmt::format("{} did not exit within 10 s of SIGKILL", Where(r)));
  }
  if (now < rejoin_->spawn_at) return;
  // A survivor that ended meanwhile (the job's last step, or a failure of
  // its own) cannot meet the replacements: everyone starts again.
  for (int r = 0; r < o_.layout.world(); ++r) {
    if (alive_[r] || Dropped(r) ||
        std::find(rejoin_->ranks.begin(), rejoin_->ranks.end(), r) != rejoin_->ranks.end())
      continue;
    return AbandonRejoin(
        fmt::format("{} {} before it could rejoin", Where(r), ExitReason(result_.exits[r])));
  }
  if (!rejoin_->spawn) {  // a shrink: the survivors go on by themselves
    rejoin_.reset();
    decision_.reset();
    ForgetEarlierReports();
    SaveState();
    return;
  }
  const int per_node = o_.layout.procs_per_node;
  if (network_) {
    for (const int r : rejoin_->ranks) {
      const int slot = slot_[r / per_node];
      if (network_->LinkUp(slot)) continue;
      Note(fmt::format("node {}: link restored (the node is rebooted in place)", r / per_node));
      network_->SetLink(slot, true);
    }
  }
  env_.extra["FMSTACK_PEER_RESTORE"] = "1";
  if (rejoin_->from_world > 0)
    env_.extra["FMSTACK_RESHAPE_FROM"] = std::to_string(rejoin_->from_world);
  try {
    SpawnRanks(rejoin_->ranks,
               fmt::format("---- {} (generation {}) ----",
                           rejoin_->from_world > 0 ? "joined" : "replaced", env_.generation));
  } catch (const std::exception& e) {
    env_.extra.erase("FMSTACK_PEER_RESTORE");
    env_.extra.erase("FMSTACK_RESHAPE_FROM");
    return AbandonRejoin(fmt::format("the replacement did not start ({})", e.what()));
  }
  env_.extra.erase("FMSTACK_PEER_RESTORE");
  env_.extra.erase("FMSTACK_RESHAPE_FROM");
  for (const int r : rejoin_->ranks) monitor_->OnReplaced(r, now);
  rejoin_.reset();
  // From here a failure is a new fault: a replacement that cannot restore
  // reports it, and the policy falls back to the checkpoint.
  decision_.reset();
  ForgetEarlierReports();
  SaveState();
}

bool Supervisor::ReportOfThisGeneration() const {
  return report_ && report_->generation >= env_.generation;
}

void Supervisor::ForgetEarlierReports() {
  if (!ReportOfThisGeneration()) report_.reset();
}

void Supervisor::FailRejoin() {
  const Seen seen = *report_;
  rejoin_.reset();
  decision_.reset();
  report_.reset();
  Detect(seen);
}

void Supervisor::AbandonRejoin(const std::string& why) {
  Note(fmt::format("checkpointless: {}: restarting every rank", why));
  if (rejoin_->counted) --history_.restarts;  // the full restart counts instead
  rejoin_.reset();
  decision_->action.restore = resilience::Restore::kCheckpoint;
  KillAll(SIGKILL);
}

}  // namespace fmstack::runtime::internal
