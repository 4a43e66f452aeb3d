// The supervisor's faults: how they are seen, decided and carried out
// (supervisor_state.cc keeps what survives a restart).
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "health/device.h"
#include "runtime/stacks.h"
#include "runtime/supervisor_impl.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace fmstack::runtime::internal {
namespace {

// A live slurmd's kernel answers a connection in well under a millisecond
// on a cluster network; a host that lost power or its link never does.
constexpr double kSlurmdProbeSeconds = 0.5;

}  // namespace

void Supervisor::Reap() {
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    if (OnNodeProcessExit(pid, status)) continue;
    for (const auto& w : workers_) {
      if (w.pid != pid) continue;
      // Its last report may still be unread: poll() saw the channel empty,
      // then the worker sent why it stops and exited before waitpid ran.
      DrainControl(w.rank);
      // A remote worker must not outlive its srun: close its lifeline.
      if (OnSlurm() && control_fd_[w.rank] >= 0) ::shutdown(control_fd_[w.rank], SHUT_RDWR);
      RankExit& x = result_.exits[w.rank];
      x = {};
      x.rank = w.rank;
      x.seconds = Since(attempt_start_, Clock::now());
      if (WIFSIGNALED(status)) x.signal = WTERMSIG(status);
      if (WIFEXITED(status)) x.exit_code = WEXITSTATUS(status);
      alive_[w.rank] = false;
      monitor_->OnExit(w.rank);
      --running_;
      const bool failed = x.signal != 0 || x.exit_code != 0;
      // A survivor of a shrink meets the others at once: it may find no
      // usable peer copy, say so and stop before the rejoin is done with.
      if (rejoin_ && x.exit_code == kFaultExitCode && ReportOfThisGeneration()) {
        FailRejoin();
        continue;
      }
      if (!failed || decision_ || reexec_) continue;
      // Nobody here sent it: a scheduler's stop that reached the worker
      // first (a program without fmstack's handler dies of it).
      if (x.signal == SIGTERM || x.signal == SIGINT || x.signal == SIGHUP) {
        OnTermination(x.signal, false, DescribeExit(x, o_.layout));
        continue;
      }
      // The first failure decides. A worker that reported why it stops is
      // believed; otherwise the exit itself is the fault. A node whose link
      // is down explains its ranks' and their peers' failures.
      if (report_ && x.exit_code == kFaultExitCode) {
        Detect(*report_);
        continue;
      }
      if (const auto lost = LostNode()) {
        Detect({{.kind = resilience::EventKind::kNodeLost,
                 .rank = lost->first * o_.layout.procs_per_node,
                 .step = monitor_->MaxStep()},
                fmt::format("node {} {} ({} {})", lost->first, lost->second, Where(w.rank),
                            ExitReason(x))});
        continue;
      }
      store_->Set(comm::FailureKey(env_.generation), fmt::format("{} {}", w.rank, ExitReason(x)));
      Detect({{.kind = resilience::EventKind::kCrash, .rank = w.rank, .step = monitor_->MaxStep()},
              DescribeExit(x, o_.layout)});
    }
  }
}

void Supervisor::CheckHealth() {
  if (decision_) return;
  const auto now = Clock::now();
  // With health agents, each node's agent watches its NIC (nic-link).
  if (network_ && agents_.empty() && now >= next_link_check_) {
    // A node's NIC: its link state, once a second (the survivors' collectives
    // would only notice at their timeout).
    next_link_check_ = now + std::chrono::seconds(1);
    for (int n = 0; n < o_.layout.nodes; ++n) {
      if (dropped_[n] || network_->LinkUp(slot_[n])) continue;
      Detect({{.kind = resilience::EventKind::kNodeLost,
               .rank = n * o_.layout.procs_per_node,
               .step = monitor_->MaxStep()},
              fmt::format("node {} lost its network link (interface eth0 is down)", n)});
      return;
    }
  }
  // On Slurm a rank late with its heartbeat (a quarter of the timeout, at
  // least a second) has its host asked whether it is still there: a host
  // that no longer answers is lost now, not at the heartbeat timeout.
  const double suspect = std::max(1.0, o_.monitor.heartbeat_timeout / 4);
  if (const auto late = OnSlurm() && now >= next_link_check_
                            ? monitor_->SilentLongerThan(now, suspect)
                            : std::nullopt) {
    next_link_check_ = now + std::chrono::seconds(1);
    if (const auto lost = LostNode()) {
      Detect({{.kind = resilience::EventKind::kNodeLost,
               .rank = lost->first * o_.layout.procs_per_node,
               .step = monitor_->MaxStep()},
              fmt::format("node {} {} ({} sent no heartbeat for {:.1f} s)", lost->first,
                          lost->second, Where(late->rank), late->silent_seconds)});
      return;
    }
  }
  if (const std::optional<SilentRank> h = monitor_->Hung(now)) {
    Detect({{.kind = resilience::EventKind::kHang, .rank = h->rank, .step = monitor_->MaxStep()},
            fmt::format("{} hung: no heartbeat for {:.1f} s (timeout {:.0f} s), last at step {} "
                        "in phase {}",
                        Where(h->rank), h->silent_seconds, o_.monitor.heartbeat_timeout, h->step,
                        h->phase)});
    return;
  }
  CheckStalled(now);
  if (decision_) return;
  if (const std::optional<int> r = monitor_->Straggler(); r && !stragglers_tolerated_) {
    Detect({{.kind = resilience::EventKind::kStraggler, .rank = *r, .step = monitor_->MaxStep()},
            fmt::format("{} is a straggler: computing more than {:.1f}x its peers' median for {} "
                        "steps in a row",
                        Where(*r), o_.monitor.straggler_factor, o_.monitor.straggler_steps)});
  }
}

void Supervisor::FireInjections() {
  const auto now = Clock::now();
  if (now >= next_scan_) {
    next_scan_ = now + std::chrono::milliseconds(200);
    std::vector<std::string> errors;
    for (InjectRequest& r : TakeRequests(o_.run_dir, &errors)) {
      if (fired_.contains(r.id)) continue;
      Note(fmt::format("fault injection: {} on rank {} after step {} requested", r.kind, r.rank,
                       r.at_step));
      pending_.push_back(std::move(r));
    }
    for (const std::string& e : errors) Note(e);
  }
  if (decision_) return;
  for (size_t i = 0; i < pending_.size();) {
    const InjectRequest& r = pending_[i];
    if (r.rank < 0 || r.rank >= o_.layout.world()) {
      Note(fmt::format("fault injection {}: rank {} does not exist (ranks 0..{}); ignored", r.kind,
                       r.rank, o_.layout.world() - 1));
      pending_.erase(pending_.begin() + static_cast<long>(i));
      continue;
    }
    if (Dropped(r.rank)) {
      Note(fmt::format("fault injection {}: {} is not training (its node was dropped); ignored",
                       r.kind, Where(r.rank)));
      pending_.erase(pending_.begin() + static_cast<long>(i));
      continue;
    }
    if (monitor_->StepOf(r.rank) < r.at_step) {
      ++i;
      continue;
    }
    if (r.kind == "corrupt-checkpoint" && !CommitSettled(r, now)) {
      ++i;
      continue;
    }
    const InjectRequest fire = r;
    pending_.erase(pending_.begin() + static_cast<long>(i));
    fired_.insert(fire.id);
    SaveState();  // before acting: a supervisor-restart must not fire it again
    Fire(fire);
    if (decision_ || reexec_) return;
  }
}

// The newest step whose checkpoint corrupt-checkpoint may corrupt: its own
// step's, or with none given ("at once") the newest there is.
namespace {
int64_t SavedBy(const InjectRequest& r) {
  return r.at_step > 0 ? r.at_step : std::numeric_limits<int64_t>::max();
}
}  // namespace

// The newest checkpoint may still be on its way to disk when the step is
// reached (under load its commit lands a few steps later): wait for it, up
// to kCommitWait, then fire anyway (CorruptNewestShard then says what it
// found).
bool Supervisor::CommitSettled(const InjectRequest& r, Clock::time_point now) {
  constexpr auto kCommitWait = std::chrono::seconds(60);
  if (NewestCheckpointCommitted(o_.checkpoint_dir, SavedBy(r))) return true;
  const auto [since, first] = waiting_for_commit_.try_emplace(r.id, now);
  if (first) {
    Note(
        fmt::format("fault injection corrupt-checkpoint: waiting up to {} s for the newest "
                    "checkpoint under {} to commit",
                    kCommitWait.count(), o_.checkpoint_dir));
  }
  if (now - since->second < kCommitWait) return false;
  Note("fault injection corrupt-checkpoint: no checkpoint committed in time; firing anyway");
  return true;
}

void Supervisor::Fire(const InjectRequest& r) {
  fired_at_ = Clock::now();
  const cluster::WorkerProcess& w = workers_.at(static_cast<size_t>(r.rank));
  Note(fmt::format("fault injection: {} on {} at step {}", r.kind, Where(r.rank),
                   monitor_->StepOf(r.rank)));
  if (r.kind == "crash") {
    SignalRank(r.rank, SIGKILL);
  } else if (r.kind == "hang") {
    if (OnSlurm()) {
      Note("fault injection hang: a SIGSTOP would stop srun, not the worker, on Slurm; ignored");
      return;
    }
    ::kill(w.pid, SIGSTOP);
  } else if (r.kind == "corrupt-checkpoint") {
    try {
      Note("fault injection: flipped a byte of " +
           CorruptNewestShard(o_.checkpoint_dir, r.rank, SavedBy(r)));
    } catch (const std::exception& e) {
      Note(fmt::format("fault injection corrupt-checkpoint: {}", e.what()));
    }
    SignalRank(r.rank, SIGKILL);  // the restart must read the checkpoint back
  } else if (r.kind == "network-cut") {
    if (!network_) {
      Note("fault injection network-cut: the run has no network namespaces; ignored");
      return;
    }
    network_->SetLink(slot_[r.rank / o_.layout.procs_per_node], false);
  } else if (r.kind == "node-down") {
    const int node = r.rank / o_.layout.procs_per_node;
    for (const int k : RanksOf(node)) {
      if (alive_[k]) SignalRank(k, SIGKILL);
    }
    if (network_) network_->SetLink(slot_[node], false);
    Detect({{.kind = resilience::EventKind::kNodeLost, .rank = r.rank, .step = monitor_->MaxStep()},
            fmt::format("node {} went down (slot {}): its {} ranks are gone", node, slot_[node],
                        o_.layout.procs_per_node)});
  } else if (IsDeviceKind(r.kind)) {
    if (o_.health.devices != "fake") {
      Note(
          fmt::format("fault injection {}: the run has no fake devices ([health] devices = "
                      "\"fake\"); ignored",
                      r.kind));
      return;
    }
    const int slot = slot_[r.rank / o_.layout.procs_per_node],
              gpu = r.rank % o_.layout.procs_per_node;
    health::RaiseOnFakeDevice(DevicesDir(slot), gpu, DeviceChange(r.kind));
    Note(fmt::format("fault injection: {} on gpu {} of {}", r.kind, gpu, SlotName(slot)));
  } else if (r.kind == "notice") {
    Detect({{.kind = resilience::EventKind::kNotice, .rank = r.rank, .step = monitor_->MaxStep()},
            fmt::format("termination notice for node {} ({:.0f} s to save)",
                        r.rank / o_.layout.procs_per_node, o_.notice_deadline)});
  } else if (r.kind == "supervisor-restart") {
    Note("supervisor-restart: stopping every worker and starting the supervisor again");
    result_.ledger.incidents().push_back(
        {.kind = "supervisor-restart",
         .step = monitor_->MaxStep(),
         .at = RunSeconds(Clock::now()),
         .decision = "restart: the new supervisor resumes from the newest checkpoint",
         .what = "fault injection: the supervisor restarts"});
    ++history_.restarts;
    reexec_ = true;
    KillAll(SIGKILL);
  } else if (IsWorkerKind(r.kind)) {
    if (control_fd_[r.rank] < 0 ||
        !SendLine(control_fd_[r.rank], {{"cmd", "inject"}, {"kind", r.kind}})) {
      Note(fmt::format("fault injection {}: {} has no control channel; ignored", r.kind,
                       Where(r.rank)));
    }
  } else {
    Note(fmt::format("fault injection: unknown kind \"{}\"; ignored", r.kind));
  }
}

void Supervisor::SaveStacks(int rank, size_t incident) const {
  if (OnSlurm()) {
    Note(fmt::format("stacks of {}: not kept (it runs on another host, under srun)", Where(rank)));
    return;
  }
  const auto w = std::find_if(workers_.begin(), workers_.end(),
                              [&](const cluster::WorkerProcess& p) { return p.rank == rank; });
  if (w == workers_.end() || w->pid <= 0) return;
  // The peers of a silent rank began to wait about a heartbeat timeout ago;
  // gdb must be done (and the rank killed) before their collectives give
  // up, or they would be blamed. A second is left for the kill. The peers
  // of a stalled rank gave up already, a stall grace before its detection,
  // and wait a collective timeout for the supervisor's word: the budget is
  // what is left of that.
  double budget = kStacksDeadlineSeconds;
  if (o_.collective_timeout > 0) {
    const double left = monitor_->AnyCollectiveFailed()
                            ? o_.collective_timeout - StallGrace(o_.collective_timeout)
                            : o_.collective_timeout - o_.monitor.heartbeat_timeout;
    budget = std::min(budget, left - 1);
  }
  if (budget < 1) {
    Note(
        fmt::format("stacks of {}: not kept: the peers' collectives time out {:.1f} s after the "
                    "hang's detection, too soon for gdb",
                    Where(rank), budget + 1));
    return;
  }
  const auto start = Clock::now();
  const Stacks stacks = CaptureStacks(w->pid, budget);
  const double took = Since(start, Clock::now());
  if (!stacks.ok) {
    Note(fmt::format("stacks of {} (pid {}): not kept: {}", Where(rank), w->pid, stacks.why));
    return;
  }
  const std::string path =
      fmt::format("{}/logs/incident{}-rank{}.stacks.txt", o_.run_dir, incident, rank);
  try {
    AtomicFileWriter f(path);
    f.Write(stacks.text.data(), stacks.text.size());
    f.Commit();
    Note(fmt::format("stacks of {} (pid {}) kept in {} ({:.1f} s)", Where(rank), w->pid, path,
                     took));
  } catch (const std::exception& e) {
    Note(fmt::format("stacks of {}: not kept: {}", Where(rank), e.what()));
  }
}

void Supervisor::Detect(const Seen& seen) {
  if (decision_) return;
  detected_at_ = Clock::now();
  resilience::Decision d =
      resilience::Decide(o_.policy,
                         {.dp_full = o_.layout.world(),
                          .dp_active = ActiveWorld(),
                          .spares_ready = static_cast<int64_t>(spares_.size())},
                         history_, seen.event, o_.layout.procs_per_node);

  if (d.verb == resilience::Verb::kCarryOn) {
    // A tolerated straggler would be detected again at every poll.
    if (seen.event.kind == resilience::EventKind::kStraggler) stragglers_tolerated_ = true;
    Note(fmt::format("{}; decision: carry on: {}", seen.what, d.reason));
    result_.ledger.incidents().push_back(
        {.kind = std::string(resilience::EventName(seen.event.kind)),
         .rank = seen.event.rank,
         .step = seen.event.step,
         .at = RunSeconds(detected_at_),
         .recovery_seconds = 0,
         .decision = "carry on: " + d.reason,
         .what = seen.what});
    SaveState();
    return;
  }
  if (seen.event.kind == resilience::EventKind::kNonFinite)
    history_.last_nonfinite_step = seen.event.step;
  if (d.max_restore_step >= 0) max_restore_step_ = d.max_restore_step;
  decision_ = d;
  metrics::Incident inc;
  inc.kind = std::string(resilience::EventName(seen.event.kind));
  inc.rank = seen.event.rank;
  inc.step = seen.event.step;
  inc.at = RunSeconds(detected_at_);
  inc.what = seen.what;
  inc.decision = fmt::format("{}: {}", resilience::VerbName(d.verb), d.reason);
  if (fired_at_) {
    inc.detect_seconds = Since(*fired_at_, detected_at_);
    result_.ledger.Book("detection", inc.detect_seconds);
    fired_at_.reset();  // a fault that follows from the recovery is not the injection's
  }
  Note(fmt::format(
      "fault: {}{}", seen.what,
      inc.detect_seconds >= 0 ? fmt::format(" (detected in {:.2f} s)", inc.detect_seconds) : ""));
  Note(fmt::format("decision: {}: {}", resilience::VerbName(d.verb), d.reason));
  // Every decision on a hang kills the rank: its stacks first.
  if (seen.event.kind == resilience::EventKind::kHang)
    SaveStacks(seen.event.rank, result_.ledger.incidents().size() + 1);
  bool moved = false;
  if ((d.verb == resilience::Verb::kRestart || d.verb == resilience::Verb::kSaveAndRestart) &&
      d.action.placement == resilience::Placement::kSpare && seen.event.rank >= 0) {
    const int node = seen.event.rank / o_.layout.procs_per_node;
    if (MoveToSpare(node)) {
      moved = true;
      inc.decision += fmt::format("; node {} moved to spare slot {}", node, slot_[node]);
    } else {
      Note("no healthy spare after all: the node is rebooted in place");
      inc.decision += "; no healthy spare: rebooted in place";
    }
  }
  result_.ledger.incidents().push_back(inc);
  MetricsOnIncident(inc.kind);
  if (d.verb == resilience::Verb::kRestart || d.verb == resilience::Verb::kSaveAndRestart) {
    recovering_ = result_.ledger.incidents().size() - 1;
    ++history_.futile_restarts;  // until a step completes after it
  }
  switch (d.verb) {
    case resilience::Verb::kStop: {
      result_.failure = fmt::format("{}; {}", seen.what, d.reason);
      result_.failed_rank = seen.event.rank;
      // The run ends: the survivors get the grace period to notice the
      // failure the store reports and to say whom they lost, in their logs.
      const auto grace = std::chrono::milliseconds(static_cast<int64_t>(o_.grace_seconds * 1000));
      term_at_ = Clock::now() + grace;
      kill_at_ = term_at_ + grace;
      if (seen.event.kind == resilience::EventKind::kHang) KillAll(SIGKILL);
      break;
    }
    case resilience::Verb::kRestart:
      if (d.action.placement == resilience::Placement::kDropReplica) {
        if (BeginShrink(seen)) break;
        inc.decision += "; the node cannot be dropped: restoring a checkpoint";
        result_.ledger.incidents().back().decision = inc.decision;
      } else if (d.action.restore == resilience::Restore::kPeers) {
        if (BeginRejoin(seen, moved)) break;
        inc.decision += "; no rank to replace in place: restoring a checkpoint";
        result_.ledger.incidents().back().decision = inc.decision;
      }
      KillAll(SIGKILL);
      break;
    case resilience::Verb::kCarryOn:
      break;
    case resilience::Verb::kSaveAndRestart:
    case resilience::Verb::kSaveAndStop: {
      // A stop with the restart budget spent ends the run as a failure: say why.
      if (d.verb == resilience::Verb::kSaveAndStop) {
        result_.failure = fmt::format("{}; {}", seen.what, d.reason);
        result_.failed_rank = seen.event.rank;
      }
      // A stop by signal has the deadline its scheduler grants; a notice, its own.
      const double deadline =
          seen.event.kind == resilience::EventKind::kSignal ? stop_deadline_ : o_.notice_deadline;
      if (d.verb == resilience::Verb::kSaveAndStop)
        stop_incident_ = result_.ledger.incidents().size() - 1;
      SendAll({{"cmd", "stop"}, {"reason", inc.kind}, {"deadline_s", deadline}});
      kill_at_ = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(deadline * 1e3));
      // A program of its own saves on SIGTERM, if at all: pass the stop on.
      if (seen.event.kind == resilience::EventKind::kSignal && !o_.workers_coordinate)
        KillAll(SIGTERM);
      break;
    }
  }
  SaveState();
}

bool Supervisor::MoveToSpare(int node) {
  while (!spares_.empty()) {
    const int spare = spares_.front();
    spares_.erase(spares_.begin());
    // A spare is checked before it is trusted: one that cannot reach the
    // network is skipped, and stays out of the pool.
    if (std::string why; !SlotReachable(spare, &why)) {
      Note(fmt::format("spare slot {} failed its check ({}): skipped", spare, why));
      continue;
    }
    if (!SlotHealthy(spare)) {
      Note(fmt::format("spare {} is not healthy ({}): skipped", SlotName(spare),
                       health_[spare].failing.empty() ? health_[spare].reason
                                                      : health_[spare].failing.begin()->second));
      continue;
    }
    if (spare == slot_[node]) {
      Note(fmt::format("node {}: back on its own slot {}, repaired ({} free slot(s) left)", node,
                       spare, spares_.size()));
      return true;
    }
    Note(
        fmt::format("node {}: its ranks move from slot {} to spare slot {} ({} spare(s) left); "
                    "slot {} is out of service",
                    node, slot_[node], spare, spares_.size(), slot_[node]));
    if (!dropped_[node]) OutOfService(slot_[node]);  // a dropped node's slot already is
    slot_[node] = spare;
    return true;
  }
  return false;
}

void Supervisor::KillAll(int sig) {
  // A worker treats SIGTERM as the scheduler's (Worker::CoordinateSignals):
  // told first, it takes ours as the end.
  if (sig == SIGTERM) SendAll({{"cmd", "terminate"}});
  for (const auto& w : workers_) {
    if (alive_[w.rank]) SignalRank(w.rank, sig);
  }
}

void Supervisor::SignalRank(int rank, int sig) {
  ::kill(workers_.at(static_cast<size_t>(rank)).pid, sig);
  if (OnSlurm() && sig == SIGKILL && control_fd_[rank] >= 0)
    ::shutdown(control_fd_[rank], SHUT_RDWR);
}

bool Supervisor::SlotReachable(int slot, std::string* why) const {
  if (network_ && !network_->LinkUp(slot)) {
    *why = "its link is down";
    return false;
  }
  if (OnSlurm()) {
    *why = cluster::ProbeSlurmd({o_.slurm.hosts.at(static_cast<size_t>(slot))}, kSlurmdProbeSeconds)
               .at(0);
    if (!why->empty()) return false;
  }
  return true;
}

std::optional<std::pair<int, std::string>> Supervisor::LostNode() const {
  if (network_) {
    for (int n = 0; n < o_.layout.nodes; ++n) {
      if (!dropped_[n] && !network_->LinkUp(slot_[n]))
        return std::pair{n, std::string("lost its network link")};
    }
  }
  if (!OnSlurm()) return std::nullopt;
  std::vector<cluster::SlurmHost> hosts;
  std::vector<int> nodes;
  for (int n = 0; n < o_.layout.nodes; ++n) {
    if (dropped_[n]) continue;
    hosts.push_back(o_.slurm.hosts.at(static_cast<size_t>(slot_[n])));
    nodes.push_back(n);
  }
  const std::vector<std::string> why = cluster::ProbeSlurmd(hosts, kSlurmdProbeSeconds);
  for (size_t i = 0; i < why.size(); ++i) {
    if (!why[i].empty())
      return std::pair{nodes[i], fmt::format("({}) is lost: {}", hosts[i].name, why[i])};
  }
  return std::nullopt;
}

void Supervisor::SendAll(const nlohmann::json& command) {
  for (size_t r = 0; r < control_fd_.size(); ++r) {
    if (control_fd_[r] >= 0 && alive_[r]) SendLine(control_fd_[r], command);
  }
}

}  // namespace fmstack::runtime::internal
