// runtime: the supervisor of one job run. It serves the rendezvous store,
// starts the workers through a cluster backend, writes every rank's output to
// its own log file and hands progress events to the caller. It watches every
// rank (process exits, heartbeats, fault reports, step times), and on each
// fault asks resilience::Decide what to do and does it: restart every worker
// so they resume from the newest good checkpoint (after an emergency save
// when the job is still healthy), or stop. Every second of the run lands in
// a goodput ledger (RUN_DIR/goodput.json).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cluster/local.h"
#include "cluster/slurm.h"
#include "metrics/goodput.h"
#include "resilience/policy.h"
#include "runtime/inject.h"
#include "runtime/monitor.h"

namespace fmstack::runtime {

// Health agents (`fmstack agent`), one per node slot, and what the
// supervisor does with their verdicts.
struct HealthOptions {
  bool enabled = false;
  std::string self_exe;          // the fmstack binary to start agents with
  std::string checks_file;       // "" = the built-in table
  std::string devices = "none";  // none | nvml | fake (one fake GPU per rank, under RUN_DIR/nodes)
  bool auto_actions = true;      // act on verdicts (off: log what would be done)
  // The local backend's stand-ins for a node's reboot and its replacement.
  double reboot_seconds = 5, replace_seconds = 30;
  std::string reboot_command;  // run with FMSTACK_NODE set instead of waiting reboot_seconds
  // A repaired node passes `fmstack burnin --expect burnin_expect` before it
  // is back in the pool ("" = no burn-in).
  std::string burnin_expect;
  double burnin_tolerance = 0.7, burnin_seconds = 2;
};

struct SuperviseOptions {
  cluster::LocalLayout layout;
  std::vector<std::string> argv;  // the worker command
  // The workers are fmstack trainers: they take a termination signal as the
  // supervisor's to coordinate and save on its "stop" command. Otherwise (a
  // program under `fmstack run --`) a stop forwards SIGTERM to them.
  bool workers_coordinate = false;
  std::string run_dir;  // logs/, run.json, goodput.json, control/
  std::string job_name;
  std::string job_id;
  std::map<std::string, std::string> extra_env;
  double grace_seconds = 5;  // SIGTERM -> SIGKILL for workers that ignore a stop
  bool netns = false;        // every node in its own network namespace (root only)
  int spares = 0;            // idle node slots a failed node's ranks can move to
  // Resilience: the policy (with its restart budget), health thresholds,
  // the deadline an emergency checkpoint gets, faults to inject.
  resilience::Policy policy{.max_restarts = 0};
  MonitorOptions monitor;
  // The workers' collective timeout (0 = not known: a program under `fmstack
  // run --`). A hung rank's peers wait for it that long, counted from about
  // its last heartbeat, and the kill must come before they give up.
  double collective_timeout = 0;
  double notice_deadline = 120;  // a termination notice (SIGUSR1 included) gives this long to save
  double stop_deadline = 25;     // a stop by SIGTERM/SIGINT/SIGHUP gives this long to save
  bool keep_on_hangup = false;   // SIGHUP is noted and the run goes on
  double node_repair_seconds = 0;  // a lost node's slot is usable again after this; 0 = never
  // Prometheus /metrics on HOST:PORT (0: any free port), or "off".
  std::string metrics_listen = "127.0.0.1:0";
  std::vector<InjectRequest> inject;
  HealthOptions health;
  std::string checkpoint_dir;  // the node-local tier's root (corrupt-checkpoint)
  // The Slurm backend: the allocation's hosts are the node slots (the job's
  // nodes, then spares); every rank starts as a srun step on its slot's host
  // and dials the supervisor's control listener. No hosts: the local backend.
  cluster::SlurmAllocation slurm;
  // Set by `fmstack run` after a supervisor-restart: continue the run in
  // run_dir (its restart count, ledger and fired injections).
  bool resume_supervisor = false;
};

struct RankExit {
  int rank = 0;
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  double seconds = 0;  // from the attempt's start to exit
};

struct RunResult {
  std::vector<RankExit> exits;  // of the last attempt, by rank
  bool finished = false;        // every worker of the last attempt exited 0 on its own
  std::string failure;          // why the run ended otherwise (names the rank)
  int failed_rank = -1;
  bool interrupted = false;  // a termination signal reached the supervisor or a worker
  int signal = 0;            // which
  bool saved = false;        // and the workers saved the current step first
  bool reexec = false;       // a supervisor-restart: exec `fmstack run` again
  int restarts = 0;
  double seconds = 0;
  metrics::Ledger ledger;
  bool ok() const { return finished; }
};

// Lines a worker prints on stdout as "@fmstack {json}" are events.
inline constexpr const char* kEventPrefix = "@fmstack ";

using EventFn = std::function<void(int rank, const std::string& json)>;
using LineFn = std::function<void(int rank, bool is_stderr, const std::string& line)>;
// One line of the supervisor's own: faults, decisions, restarts.
using NoteFn = std::function<void(const std::string& line)>;

// Runs the job to its end. Throws Error only when it cannot start.
RunResult Supervise(const SuperviseOptions& options, const EventFn& on_event, const LineFn& on_line,
                    const NoteFn& on_note);

// "was killed by SIGKILL", "exited with status 2".
std::string ExitReason(const RankExit& e);
// "rank 3 (node 1, local rank 1) was killed by SIGKILL" and the like.
std::string DescribeExit(const RankExit& e, const cluster::LocalLayout& layout);

// A worker that detected a fault itself (NaN, replica mismatch, checkpoint
// write failure) reports it on the control channel and exits with this.
inline constexpr int kFaultExitCode = 75;

}  // namespace fmstack::runtime
