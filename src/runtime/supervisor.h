// runtime: the supervisor of one job run. It serves the rendezvous store,
// starts the workers through a cluster backend, writes every rank's output to
// its own log file, hands progress events to the caller, forwards SIGINT and
// SIGTERM, reaps the workers, and when one dies, reports it in the store (so
// the survivors' collectives name it) and brings the rest down.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cluster/local.h"

namespace fmstack::runtime {

struct SuperviseOptions {
  cluster::LocalLayout layout;
  std::vector<std::string> argv;  // the worker command
  std::string log_dir;            // rank<N>.log for every rank
  std::string job_id;
  std::map<std::string, std::string> extra_env;
  double grace_seconds = 5;  // after a failure, before the rest get SIGTERM (and then SIGKILL)
  bool netns = false;        // every node in its own network namespace (root only)
};

struct RankExit {
  int rank = 0;
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  double seconds = 0;  // from start to exit
};

struct RunResult {
  std::vector<RankExit> exits;  // by rank
  int failed_rank = -1;         // the first rank that failed, or -1
  std::string failure;          // what happened to it
  bool interrupted = false;     // SIGINT/SIGTERM reached the supervisor
  double seconds = 0;
  bool ok() const { return failed_rank < 0 && !interrupted; }
};

// Lines a worker prints on stdout as "@fmstack {json}" are events.
inline constexpr const char* kEventPrefix = "@fmstack ";

using EventFn = std::function<void(int rank, const std::string& json)>;
using LineFn = std::function<void(int rank, bool is_stderr, const std::string& line)>;

// Runs the job to completion. Throws Error only when it cannot start.
RunResult Supervise(const SuperviseOptions& options, const EventFn& on_event,
                    const LineFn& on_line);

// "was killed by SIGKILL", "exited with status 2".
std::string ExitReason(const RankExit& e);
// "rank 3 (node 1, local rank 1) was killed by SIGKILL" and the like.
std::string DescribeExit(const RankExit& e, const cluster::LocalLayout& layout);

}  // namespace fmstack::runtime
