#include "sim/cluster_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>

#include "ckpt/choose.h"
#include "sim/event_queue.h"
#include "sim/faults.h"
#include "util/error.h"

namespace fmstack::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class NodeState : uint8_t { kJob, kSpare, kAway };
enum class Category : uint8_t { kDetection, kWaiting, kRestart, kCheckpoint, kMaintenance };

// A stretch of wall time in which the job does not train. Waiting has no
// length of its own: it ends when the last node the job needs arrives.
struct Phase {
  double seconds = 0;
  Category category = Category::kRestart;
};

struct Checkpoint {
  double work = 0;
  double saved_at = 0;
  bool milestone = false;
  std::vector<double> committed_at;  // per tier; +inf once deleted there
};

constexpr size_t kMaxMilestones = 48;

struct SilentFault {
  double detect_at = 0, onset = 0;
  int64_t node = 0;
  int cause = 0;
  double out_of_service = 0;
};

class Run {
 public:
  Run(const Scenario& s, uint64_t seed)
      : s_(s),
        faults_(s.causes, s.planned_per_node_hour, s.job_nodes + s.spare_nodes, seed),
        nodes_(static_cast<size_t>(s.job_nodes + s.spare_nodes), NodeState::kJob),
        dp_active_(s.dp) {
    for (int64_t n = s.job_nodes; n < s.job_nodes + s.spare_nodes; ++n) {
      nodes_[static_cast<size_t>(n)] = NodeState::kSpare;
      spare_ids_.push_back(n);
    }
    spares_ready_ = s.spare_nodes;
    r_.by_cause.assign(s.causes.size(), 0);
    next_fault_ = faults_.Next();
    next_checkpoint_ = s.checkpoint_interval;
  }

  RunResult Go() {
    Point();
    for (;;) {
      const double finish = FinishTime();
      const double returns = returns_.empty() ? kInf : returns_.next_time();
      const double silent = silent_.empty() ? kInf : silent_.front().detect_at;
      const double phase = running_ ? kInf : phase_end_;
      const double checkpoint = running_ ? next_checkpoint_ : kInf;
      const double next = std::min(
          {s_.horizon_seconds, finish, next_fault_.time, returns, silent, phase, checkpoint});
      Advance(next);
      if (next >= s_.horizon_seconds) break;
      if (next == finish) {
        r_.finished = true;
        break;
      }
      if (next == next_fault_.time) {
        const FaultEvent e = next_fault_;
        next_fault_ = faults_.Next();
        OnFault(e);
      } else if (next == silent) {
        const SilentFault f = silent_.front();
        silent_.pop_front();
        Interrupt(f.onset, 0, f.cause, f.node, f.out_of_service, /*silent=*/true);
      } else if (next == returns) {
        OnNodeBack(returns_.Pop().payload);
      } else if (next == phase) {
        PhaseDone();
      } else {
        SaveCheckpoint();
      }
      Point();
    }
    r_.wall = t_;
    r_.work = work_;
    r_.cost =
        static_cast<double>(s_.job_nodes + s_.spare_nodes) * s_.price_per_node_hour * t_ / 3600.0;
    Point();
    return std::move(r_);
  }

 private:
  double Rate() const { return static_cast<double>(dp_active_) / static_cast<double>(s_.dp); }

  double FinishTime() const {
    if (!running_ || s_.work_seconds <= 0) return kInf;
    return t_ + std::max(0.0, s_.work_seconds - work_) / Rate();
  }

  // Books [t_, to) as training or as the current phase's badput.
  void Advance(double to) {
    const double dt = to - t_;
    if (running_) {
      work_ += dt * Rate();
      r_.badput.degraded += dt * (1.0 - Rate());
    } else {
      switch (phases_.front().category) {
        case Category::kDetection:
          r_.badput.detection += dt;
          break;
        case Category::kWaiting:
          r_.badput.waiting += dt;
          break;
        case Category::kRestart:
          r_.badput.restart += dt;
          break;
        case Category::kCheckpoint:
          r_.badput.checkpoint += dt;
          break;
        case Category::kMaintenance:
          r_.badput.maintenance += dt;
          break;
      }
    }
    t_ = to;
  }

  void Point() {
    if (s_.record_timeline) r_.timeline.push_back({t_, work_});
  }

  void OnFault(const FaultEvent& e) {
    NodeState& state = nodes_[static_cast<size_t>(e.node)];
    if (state == NodeState::kAway) return;  // already out of service: thinned
    const bool planned = e.cause == kPlannedCause;
    const bool restart_only =
        !planned && s_.causes[static_cast<size_t>(e.cause)].recovery == catalog::Recovery::kRestart;
    if (state == NodeState::kSpare) {
      if (restart_only) return;  // an idle spare shrugs off a software fault
      state = NodeState::kAway;
      --spares_ready_;
      returns_.At(t_ + e.out_of_service, e.node);
      return;
    }
    if (s_.record_timeline) r_.marks.push_back({t_, e.cause});
    if (planned) {
      ++r_.planned;
      Maintenance(e.node, e.out_of_service);
      return;
    }
    ++r_.interruptions;
    ++r_.by_cause[static_cast<size_t>(e.cause)];
    const catalog::FaultCause& cause = s_.causes[static_cast<size_t>(e.cause)];
    if (cause.silent) {
      // Training goes on, on corrupted numbers, until someone notices.
      const SilentFault f{t_ + cause.detect_seconds, t_, e.node, e.cause, e.out_of_service};
      const auto later = [](const SilentFault& a, const SilentFault& b) {
        return a.detect_at < b.detect_at;
      };
      silent_.insert(std::upper_bound(silent_.begin(), silent_.end(), f, later), f);
      return;
    }
    Interrupt(t_, cause.detect_seconds, e.cause, e.node, e.out_of_service, /*silent=*/false);
  }

  resilience::JobView View() const { return {s_.dp, dp_active_, spares_ready_}; }

  void SendAway(int64_t node, double seconds) {
    nodes_[static_cast<size_t>(node)] = NodeState::kAway;
    returns_.At(t_ + seconds, node);
  }

  void TakeSpare() {
    while (!spare_ids_.empty()) {
      const int64_t n = spare_ids_.back();
      spare_ids_.pop_back();
      if (nodes_[static_cast<size_t>(n)] != NodeState::kSpare) continue;  // stale entry
      nodes_[static_cast<size_t>(n)] = NodeState::kJob;
      --spares_ready_;
      return;
    }
  }

  void Interrupt(double onset, double detect, int cause_index, int64_t node, double away,
                 bool silent) {
    const catalog::FaultCause& cause = s_.causes[static_cast<size_t>(cause_index)];
    const bool replaced = cause.recovery != catalog::Recovery::kRestart;
    if (replaced && nodes_[static_cast<size_t>(node)] != NodeState::kAway) SendAway(node, away);
    const resilience::Action a =
        resilience::OnFault(s_.policy, View(), {.recovery = cause.recovery, .silent = silent});
    double load = 0;
    if (a.restore == resilience::Restore::kCheckpoint) {
      load = RestoreCheckpoint(silent ? t_ : onset, onset, a.restore_before_fault,
                               cause.recovery == catalog::Recovery::kReplace);
    } else {
      ++r_.restores_from_peers;
      LoseCurrentStep();
    }
    std::vector<Phase> phases;
    if (detect > 0) phases.push_back({detect, Category::kDetection});
    Place(a);
    phases.push_back({RecoverySeconds(a.restore, load), Category::kRestart});
    Begin(phases, /*reset_clock=*/true);
  }

  void Maintenance(int64_t node, double window) {
    SendAway(node, window);
    const resilience::Action a = resilience::OnMaintenance(s_.policy, View());
    double seconds = 0;
    if (a.restore == resilience::Restore::kCheckpoint) {
      // Saved just before the window: nothing lost, loaded from the fastest tier.
      RecordCheckpoint(s_.checkpoint_blocking);
      seconds = s_.checkpoint_blocking + RecoverySeconds(a.restore, FastestRead());
    } else {
      seconds = RecoverySeconds(a.restore, 0);
    }
    Place(a);
    Begin({{seconds, Category::kMaintenance}}, /*reset_clock=*/true);
  }

  double FastestRead() const { return s_.tiers.empty() ? 0 : s_.tiers.front().read_seconds; }

  double RecoverySeconds(resilience::Restore restore, double load) const {
    switch (restore) {
      case resilience::Restore::kCheckpoint:
        return s_.restart_seconds + load;
      case resilience::Restore::kPeers:
        return s_.peer_rebuild_seconds + s_.peer_restore_seconds;
      case resilience::Restore::kNone:
        return s_.peer_rebuild_seconds;
    }
    return 0;
  }

  void Place(const resilience::Action& a) {
    switch (a.placement) {
      case resilience::Placement::kSameNode:
        break;
      case resilience::Placement::kSpare:
        TakeSpare();
        ++r_.spare_swaps;
        break;
      case resilience::Placement::kWaitForNode:
        ++need_nodes_;
        ++r_.waits;
        break;
      case resilience::Placement::kDropReplica:
        dp_active_ = a.dp_after;
        ++r_.shrinks;
        break;
    }
  }

  // Rolls work back to the restore point the policy's rule picks; returns
  // the seconds to read it. `stop` is when the job stopped writing.
  double RestoreCheckpoint(double stop, double onset, bool before_fault, bool node_lost) {
    ++r_.restores_from_checkpoint;
    std::vector<ckpt::CheckpointCopy> copies;
    for (size_t k = 0; k < ckpts_.size(); ++k) {
      for (size_t i = 0; i < s_.tiers.size(); ++i) {
        copies.push_back(
            {.step = static_cast<int64_t>(k),
             .tier = static_cast<int>(i),
             .committed = ckpts_[k].committed_at[i] <= stop,
             .valid = !before_fault || ckpts_[k].saved_at < onset,
             .reachable = !(s_.tiers[i].node_local && node_lost && !s_.local_replica)});
      }
    }
    const std::optional<size_t> pick = ckpt::ChooseRestore(copies);
    double restored = 0, read = 0;
    size_t keep = 0;
    if (pick) {
      const ckpt::CheckpointCopy& c = copies[*pick];
      keep = static_cast<size_t>(c.step) + 1;
      restored = ckpts_[keep - 1].work;
      read = s_.tiers[static_cast<size_t>(c.tier)].read_seconds;
    } else {
      ++r_.from_scratch;
    }
    ckpts_.resize(keep);  // newer ones were never committed, or are corrupt
    r_.badput.lost_work += work_ - restored;
    work_ = restored;
    return read;
  }

  void LoseCurrentStep() {
    const double partial = std::fmod(work_, s_.step_seconds);
    r_.badput.lost_work += partial;
    work_ -= partial;
  }

  void RecordCheckpoint(double stall) {
    Checkpoint c{work_, t_, false, {}};
    for (const TierModel& tier : s_.tiers)
      c.committed_at.push_back(t_ + stall + tier.write_seconds);
    if (s_.milestone_interval > 0 && t_ - last_milestone_ >= s_.milestone_interval) {
      c.milestone = true;
      last_milestone_ = t_;
    }
    ckpts_.push_back(std::move(c));
    ++r_.checkpoints;
    Retain();
  }

  // Retention: the newest `keep` everywhere; older milestones only on the
  // durable tiers (at most kMaxMilestones of them); the rest is deleted.
  void Retain() {
    const size_t keep = static_cast<size_t>(std::max<int64_t>(1, s_.keep));
    size_t seen = 0, milestones = 0;
    for (size_t k = ckpts_.size(); k-- > 0;) {
      Checkpoint& c = ckpts_[k];
      if (++seen <= keep) continue;
      if (c.milestone && milestones < kMaxMilestones) {
        ++milestones;
        for (size_t i = 0; i < s_.tiers.size(); ++i) {
          if (s_.tiers[i].node_local) c.committed_at[i] = kInf;
        }
        continue;
      }
      ckpts_.erase(ckpts_.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }

  void SaveCheckpoint() {
    RecordCheckpoint(s_.checkpoint_blocking);
    next_checkpoint_ = t_ + s_.checkpoint_interval;
    if (s_.checkpoint_blocking > 0) Begin({{s_.checkpoint_blocking, Category::kCheckpoint}}, false);
  }

  // Replaces whatever the job was doing with `phases`; a wait for nodes goes
  // in front of the last phase (the restart) while nodes are missing.
  void Begin(std::vector<Phase> phases, bool reset_clock) {
    phases_.assign(phases.begin(), phases.end());
    if (need_nodes_ > 0) {
      phases_.insert(phases_.end() - 1, Phase{kInf, Category::kWaiting});
    }
    reset_clock_ = reset_clock;
    running_ = false;
    StartFront();
  }

  void StartFront() {
    while (!phases_.empty() && phases_.front().category == Category::kWaiting && need_nodes_ == 0) {
      phases_.pop_front();
    }
    if (phases_.empty()) {
      Resume();
      return;
    }
    phase_end_ = t_ + phases_.front().seconds;
  }

  void PhaseDone() {
    phases_.pop_front();
    StartFront();
  }

  void Resume() {
    running_ = true;
    dp_active_ += grow_pending_;
    grow_pending_ = 0;
    if (reset_clock_) next_checkpoint_ = t_ + s_.checkpoint_interval;
    next_checkpoint_ = std::max(next_checkpoint_, t_);
    MaybeGrow();
  }

  void OnNodeBack(int64_t node) {
    NodeState& state = nodes_[static_cast<size_t>(node)];
    if (state != NodeState::kAway) return;
    if (need_nodes_ > 0) {
      state = NodeState::kJob;
      if (--need_nodes_ == 0 && !running_ && phases_.front().category == Category::kWaiting) {
        PhaseDone();
      }
      return;
    }
    state = NodeState::kSpare;
    spare_ids_.push_back(node);
    ++spares_ready_;
    MaybeGrow();
  }

  // Elastic: a free node while replicas are missing -> rebuild one in.
  void MaybeGrow() {
    if (!running_ || !resilience::ShouldGrow(s_.policy, View())) return;
    TakeSpare();
    ++r_.grows;
    grow_pending_ = 1;
    LoseCurrentStep();
    Begin({{s_.peer_rebuild_seconds + s_.peer_restore_seconds, Category::kRestart}}, false);
  }

  const Scenario& s_;
  FaultStream faults_;
  FaultEvent next_fault_;
  EventQueue<int64_t> returns_;  // nodes coming back from reboot / repair / maintenance
  std::vector<NodeState> nodes_;
  std::vector<int64_t> spare_ids_;  // may hold stale entries; TakeSpare skips them
  int64_t spares_ready_ = 0;
  double t_ = 0, work_ = 0;
  int64_t dp_active_;
  int64_t grow_pending_ = 0;
  int64_t need_nodes_ = 0;
  bool running_ = true;
  bool reset_clock_ = false;
  std::deque<Phase> phases_;
  double phase_end_ = kInf;
  double next_checkpoint_ = 0;
  double last_milestone_ = -kInf;
  std::deque<Checkpoint> ckpts_;  // oldest first
  std::deque<SilentFault> silent_;
  RunResult r_;
};

}  // namespace

RunResult Simulate(const Scenario& scenario, uint64_t seed) {
  if (!(scenario.step_seconds > 0) || !(scenario.checkpoint_interval > 0) ||
      scenario.job_nodes < 1 || scenario.dp < 1 || !(scenario.horizon_seconds > 0)) {
    throw Error(fmt::format(
        "sim: scenario needs positive step time ({}), checkpoint interval ({}), job nodes ({}), "
        "dp ({}) and horizon ({})",
        scenario.step_seconds, scenario.checkpoint_interval, scenario.job_nodes, scenario.dp,
        scenario.horizon_seconds));
  }
  return Run(scenario, seed).Go();
}

}  // namespace fmstack::sim
