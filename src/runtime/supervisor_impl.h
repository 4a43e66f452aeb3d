// runtime (private): the supervisor's state and the pieces of its loop,
// shared by supervisor.cc (attempts, I/O, events) and supervisor_faults.cc
// (detection, decisions, injection, persisted state).
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "cluster/netns.h"
#include "comm/tcp_store.h"
#include "metrics/exporter.h"
#include "metrics/registry.h"
#include "runtime/control.h"
#include "runtime/control_tcp.h"
#include "runtime/nodes.h"
#include "runtime/supervisor.h"
#include "util/dir_lock.h"
#include "util/error.h"

namespace fmstack::runtime::internal {

inline double Since(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// gdb attaches and prints a rank's stacks in 1-5 s; the recovery waits for
// it at most this long (less when the peers' collectives would give up sooner).
constexpr double kStacksDeadlineSeconds = 20;

// How long to wait for the other ranks' reports once one came, when more
// than one rank has not reported: ranks enter the collective that fails up
// to a step apart, so they time out up to a step apart.
inline double StallGrace(double collective_timeout) {
  return std::clamp(collective_timeout / 4, 1.0, 10.0);
}

// A signal as signalfd delivers it: who sent it and how.
struct SignalInfo {
  int signo = 0;
  int code = 0;  // SI_USER: kill(); SI_KERNEL: the terminal (Ctrl-C, a hangup)
  int pid = 0;   // the sender (0 for the kernel)
};

// Blocks SIGCHLD and the signals that stop a run (SIGTERM, SIGINT, SIGHUP,
// SIGUSR1, SIGQUIT) for the supervisor's lifetime and reads them from a
// descriptor instead; the old mask comes back on destruction. Threads the
// supervisor starts later inherit the mask, so the loop sees every one.
class SignalFd {
 public:
  SignalFd() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGQUIT}) sigaddset(&set, s);
    sigprocmask(SIG_BLOCK, &set, &old_);
    fd_ = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd_ < 0) throw Error(std::string("signalfd: ") + std::strerror(errno));
  }
  ~SignalFd() {
    ::close(fd_);
    sigprocmask(SIG_SETMASK, &old_, nullptr);
  }
  int fd() const { return fd_; }
  std::vector<SignalInfo> Take() {
    std::vector<SignalInfo> out;
    signalfd_siginfo info;
    while (::read(fd_, &info, sizeof info) == sizeof info)
      out.push_back(
          {static_cast<int>(info.ssi_signo), info.ssi_code, static_cast<int>(info.ssi_pid)});
    return out;
  }

 private:
  int fd_ = -1;
  sigset_t old_;
};

// What carries a worker's bytes to the supervisor: stdout, stderr, control.
struct Stream {
  enum Kind { kOut, kErr, kControl } kind;
  int rank;
  int fd;
  std::string pending;  // a partial line (stdout/stderr)
  LineReader control;
};

// A fault seen during an attempt, before the decision.
struct Seen {
  resilience::RuntimeEvent event;
  std::string what;
  // The communicator generation a worker's report speaks for (-1: not said).
  // A report made in the generation a rejoin creates outlives the rejoin's
  // bookkeeping: it is the rejoin's own failure.
  int64_t generation = -1;
};

inline std::optional<resilience::EventKind> ReportedKind(const std::string& kind) {
  using resilience::EventKind;
  if (kind == "non-finite") return EventKind::kNonFinite;
  if (kind == "silent-corruption") return EventKind::kSilentCorruption;
  if (kind == "checkpoint-failed") return EventKind::kCheckpointFailed;
  if (kind == "crash") return EventKind::kCrash;
  if (kind == "peer-restore-failed") return EventKind::kPeerRestoreFailed;
  return std::nullopt;
}

class Supervisor {
 public:
  Supervisor(const SuperviseOptions& o, const EventFn& on_event, const LineFn& on_line,
             const NoteFn& on_note)
      : o_(o), on_event_(on_event), on_line_(on_line), on_note_(on_note) {}

  RunResult Run();

 private:
  void RunAttempt();
  void Spawn();
  // A requeued Slurm job's supervisor: the requeue is an incident of the run.
  void NoteRequeue();
  // Starts `ranks` (every rank of an attempt, or replacements); `banner`
  // opens their part of the log ("" on a run's first start: logs restart).
  void SpawnRanks(const std::vector<int>& ranks, const std::string& banner);
  // Checkpointless recovery in place: the lost ranks are replaced and the
  // survivors rebuild their groups without restarting. False when the
  // fault cannot be handled so (the caller restarts everything).
  bool BeginRejoin(const Seen& seen, bool moved_to_spare);
  // The start of every in-place recovery: `lost` are killed and named in
  // the store, the next generation begins, and rejoin_ waits for them to be
  // gone (then replaced, or not: an elastic shrink).
  void LoseRanks(const std::vector<int>& lost, const Seen& seen, bool replace);
  void AdvanceRejoin();
  // A worker's report made in the generation the rejoin created: the
  // rejoin's own failure, kept when the rejoin's decision is done with.
  bool ReportOfThisGeneration() const;
  void ForgetEarlierReports();
  // A survivor reported the rejoin failed and stopped before it was done with.
  void FailRejoin();
  // The in-place recovery cannot go on: every rank restarts from the checkpoint.
  void AbandonRejoin(const std::string& why);
  // Elastic (supervisor_elastic.cc): drop the lost node and go on with the
  // survivors as a smaller group (false when that cannot be done); take a
  // free slot for a dropped node and grow back; slots out of service come
  // back after o_.node_repair_seconds.
  bool BeginShrink(const Seen& seen);
  void MaybeGrow();
  void RepairNodes();
  void OutOfService(int slot);
  // Sends every training survivor (not in `except`) its place in the group
  // of the current generation.
  void SendRejoin(const std::vector<int>& except);
  int ActiveNodes() const {
    return static_cast<int>(std::count(dropped_.begin(), dropped_.end(), false));
  }
  int ActiveWorld() const { return ActiveNodes() * o_.layout.procs_per_node; }
  // Prometheus series (supervisor_metrics.cc): no-ops when metrics are off.
  void StartMetrics();
  void WriteTargets() const;  // RUN_DIR/metrics/targets.json: the supervisor and the agents
  void Publish();             // the gauges, at most 4 times a second
  void MetricsOnStep(const nlohmann::json& e);
  void MetricsOnCheckpoint(int64_t step, double blocking_seconds);
  void MetricsOnIncident(const std::string& kind);
  void MetricsOnCommit(const std::string& tier, double seconds);
  void MetricsOnRestore(const std::string& source, double seconds);
  void MetricsOnRecovered(const std::string& kind, double seconds);
  // Node health (supervisor_health.cc): agents per slot, their verdicts,
  // node states and operators' requests. No-ops when o_.health is off.
  void StartAgents();
  void StartAgent(int slot);
  // A burn-in under way when the job ends gets its verdict (it is bounded
  // by health.burnin_seconds), so the pool is not left with a node in limbo.
  void AwaitBurnins();
  void StopAgents();
  void TendAgents();  // restarts dead agents, takes `fmstack node` requests
  // True when `pid` was an agent's or a reboot command's.
  bool OnNodeProcessExit(pid_t pid, int status);
  void OnAgentMessage(int slot, const nlohmann::json& m);
  void ActOnNode(int slot, resilience::NodeAction action, const std::string& reason,
                 const std::string& by);
  // The slot leaves service: drained with `reason`, rebooted or replaced.
  void TakeOut(int slot, resilience::NodeAction action, const std::string& reason,
               const std::string& by);
  // Repaired: healthy devices and link, then burn-in (when configured),
  // then back in the pool.
  void NodeRepaired(int slot);
  void StartBurnin(int slot);
  void ReturnToPool(int slot, const std::string& what);
  void HandleNodeOps();
  std::string ApplyNodeOp(const NodeOp& op, const std::string& name);
  void SendPids(int slot);
  void ResetFakeDevices(int slot);
  std::string DevicesDir(int slot) const;
  int JobNodeOn(int slot) const;  // the job node running on `slot`, -1 = none
  bool SlotHealthy(int slot) const;
  std::string NodeState(int slot) const;
  void WriteNodes() const;
  void PublishNodes();  // node states and device readings as Prometheus series
  void LogNodeEvent(int slot, const std::string& action, const std::string& by,
                    const std::string& reason) const;
  static std::string SlotName(int slot) { return "node" + std::to_string(slot); }
  bool Dropped(int rank) const { return dropped_[rank / o_.layout.procs_per_node]; }
  std::vector<int> RanksOf(int node) const {
    std::vector<int> ranks;
    for (int l = 0; l < o_.layout.procs_per_node; ++l)
      ranks.push_back(node * o_.layout.procs_per_node + l);
    return ranks;
  }
  // A rank's place in the training group (nodes dropped, the rest close
  // up node-major); -1 when its node is dropped.
  int GroupRank(int rank) const;
  // The rank whose reports speak for the group (steps, restores, saves):
  // the group's rank 0.
  int Lead() const;
  void Poll();
  // supervisor_signals.cc: the termination contract (docs/resilience.md,
  // "Stopping a run"). Reads the signals that arrived; a termination starts
  // one coordinated stop, whatever delivers it and however often.
  void TakeSignals();
  // A termination seen by the supervisor, reported by a worker (`source`
  // names it), or read from a worker's exit by a signal nobody here sent.
  void OnTermination(int sig, bool from_terminal, const std::string& source);
  // The emergency save of a stop by signal did not complete: the steps since
  // the newest commit are lost, and the stop's incident says how many.
  void BookStopLoss();
  void PollAgents(std::span<const pollfd> fds);  // fds: the agents', in slot order
  void Deliver(Stream& s, std::string_view data);
  // Reads what a rank's control channel holds now, without waiting.
  void DrainControl(int rank);
  void OnControl(int rank, const nlohmann::json& m);
  void OnStepEvent(int rank, const nlohmann::json& e);
  void Reap();
  void CheckHealth();
  // supervisor_stall.cc: a worker's collective failed with no rank dead; a
  // rank that alone does not say so is stalled (RankMonitor::Stalled).
  void OnCollectiveFailed(int rank, const nlohmann::json& m);
  void CheckStalled(Clock::time_point now);
  void FireInjections();
  void Fire(const InjectRequest& r);
  bool CommitSettled(const InjectRequest& r, Clock::time_point now);
  void Detect(const Seen& seen);
  // Keeps a hung rank's stacks (runtime/stacks.h) for incident `incident`
  // before the decision's kill, and says where in the supervisor's log.
  void SaveStacks(int rank, size_t incident) const;
  void KillAll(int sig);
  // Signals one rank's process (srun, for the Slurm backend: a SIGKILL also
  // closes its control connection, the remote worker's lifeline).
  void SignalRank(int rank, int sig);
  bool OnSlurm() const { return !o_.slurm.hosts.empty(); }
  // The Slurm backend's workers dial in: their control connections.
  void AcceptControl();
  // A job node that lost its link (netns) or whose slurmd stopped answering
  // (Slurm), with why; nullopt when every one is reachable.
  std::optional<std::pair<int, std::string>> LostNode() const;
  bool SlotReachable(int slot, std::string* why) const;
  void SendAll(const nlohmann::json& command);
  void Note(const std::string& line) const {
    if (on_note_) on_note_(line);
  }
  void SaveState() const;
  // Moves `node`'s ranks to the first healthy spare slot; false when none is.
  bool MoveToSpare(int node);
  void LoadState();
  // A rerun of the run directory continues the ledger of the runs before it
  // (RUN_DIR/goodput.json): their incidents, attempts and wall time.
  void ContinueLedger();
  // Seconds into the run's whole life (every attempt's wall time) at `t`.
  double RunSeconds(Clock::time_point t) const { return wall_before_ + Since(start_, t); }
  void WriteInfo(const std::string& state) const;
  std::string Where(int rank) const {
    return fmt::format("rank {} (node {}, local rank {})", rank, rank / o_.layout.procs_per_node,
                       rank % o_.layout.procs_per_node);
  }

  const SuperviseOptions& o_;
  const EventFn& on_event_;
  const LineFn& on_line_;
  const NoteFn& on_note_;
  const Clock::time_point start_ = Clock::now();
  std::unique_ptr<DirLock> lock_;
  std::unique_ptr<SignalFd> signals_;
  std::unique_ptr<cluster::NodeNetwork> network_;
  std::unique_ptr<comm::TcpStoreServer> store_;
  std::unique_ptr<ControlListener> listener_;  // the Slurm backend's control channels
  std::vector<int64_t> spawn_gen_;             // by rank: the generation it was started in
  int64_t program_port_generation_ = -1;       // the generation MASTER_PORT was chosen for
  std::set<int> released_;                     // Slurm: slots released from the allocation
  cluster::LaunchEnv env_;
  RunResult result_;
  resilience::RunHistory history_;
  int64_t max_restore_step_ = -1;
  int slurm_requeues_ = 0;  // SLURM_RESTART_COUNT already in the ledger
  std::set<std::string> fired_;
  std::vector<InjectRequest> pending_;
  // corrupt-checkpoint requests that are due, waiting since when for the
  // newest checkpoint to commit (NewestCheckpointCommitted).
  std::map<std::string, Clock::time_point> waiting_for_commit_;
  int64_t verified_step_ = 0;    // newest step whose replicas every rank checked equal
  int64_t committed_step_ = -1;  // newest step a worker reported committed (any tier)
  // The stop under way: the signal that began it, the save's deadline, the
  // incident it was booked as, and signals already noted as repeats.
  double stop_deadline_ = 0;
  std::optional<size_t> stop_incident_;
  std::set<int> repeats_noted_;
  // Node slots: the job's nodes run on slot_[node]; spares_ are idle slots a
  // failed node's ranks can move to (with --netns, each slot is a namespace).
  std::vector<int> slot_, spares_;

  // The current attempt.
  std::vector<cluster::WorkerProcess> workers_;
  std::vector<std::ofstream> logs_;
  std::set<int> attempt_marked_;  // ranks whose log has this attempt's marker
  std::vector<Stream> streams_;
  std::vector<int> control_fd_;  // by rank; -1 when closed
  std::vector<bool> alive_;
  int running_ = 0;
  Clock::time_point attempt_start_;
  std::unique_ptr<RankMonitor> monitor_;
  std::optional<resilience::Decision> decision_;
  std::optional<Seen> report_;  // a worker's own fault report, awaiting its exit
  Clock::time_point detected_at_, term_at_ = Clock::time_point::max(),
                                  kill_at_ = Clock::time_point::max();
  std::optional<Clock::time_point> fired_at_;  // the newest injection of this attempt
  std::optional<size_t> recovering_;           // incident awaiting its first step
  bool restored_ = false;                      // rank 0 reported its restore this attempt
  bool reexec_ = false;
  bool stragglers_tolerated_ = false;  // the policy carried on past one: stop looking
  Clock::time_point next_scan_, next_link_check_;
  // From here the ledger counts a relaunch: the attempt's start, or the
  // detection of a fault recovered in place.
  Clock::time_point relaunch_at_;
  struct Rejoin {
    std::vector<int> ranks;      // lost ranks, replaced once they are gone (or newcomers)
    Clock::time_point spawn_at;  // after the policy's backoff
    Clock::time_point gone_by;   // the lost ranks must have exited by then
    bool spawn = true;           // false: a shrink, nobody replaces them
    int from_world = 0;          // a grow: the newcomers reshape from this world
    bool counted = true;         // counted as a restart (a grow is not a fault)
  };
  std::unique_ptr<metrics::Registry> registry_;
  std::unique_ptr<metrics::Exporter> exporter_;
  Clock::time_point next_publish_;
  double wall_before_ = 0;                    // the ledger's wall time before a supervisor-restart
  double last_save_ = 0;                      // Unix seconds of the newest save, for its interval
  std::vector<bool> dropped_;                 // by job node: not training (elastic)
  std::map<int, Clock::time_point> repairs_;  // slot out of service -> back in the pool
  std::optional<Rejoin> rejoin_;
  struct AgentProc {
    pid_t pid = -1;
    int fd = -1;
    LineReader reader;
    Clock::time_point restart_at = Clock::time_point::max();
    int starts = 0;
    std::string endpoint;  // HOST:PORT of its /metrics, "" = not serving
  };
  struct SlotHealth {
    nlohmann::json devices;  // the agent's newest reading
    std::string admin{};     // "" = in service, "drain" = out (or leaving) with `reason`
    std::string repair{};    // "" | "reboot" | "replace": under way
    std::string reason{}, by{};
    double since = 0;                              // Unix seconds of the admin change
    std::map<std::string, std::string> failing{};  // check -> reason, checks asking for an action
    pid_t reboot_pid = -1;
    pid_t burnin_pid = -1;
  };
  std::vector<AgentProc> agents_;   // by slot; empty when health is off
  std::vector<SlotHealth> health_;  // by slot
  bool auto_actions_ = true;
  Clock::time_point next_node_ops_;
};

}  // namespace fmstack::runtime::internal
