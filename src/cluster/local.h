// cluster: the local backend. Starts the workers of N "nodes" x P processes
// on this machine, each with the environment torchrun gives its workers
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK,
// ROLE_WORLD_SIZE, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_*) plus FMSTACK_* for fmstack's own, and its stdout and
// stderr on pipes for the supervisor. As under torchrun, MASTER_PORT is a
// free port left to the program's own store: fmstack's store is
// FMSTACK_STORE_ADDR:FMSTACK_STORE_PORT.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace fmstack::cluster {

struct LocalLayout {
  int nodes = 1;
  int procs_per_node = 1;
  int world() const { return nodes * procs_per_node; }
};

struct WorkerProcess {
  int rank = 0, node = 0, local_rank = 0;
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;  // read ends; the supervisor owns them
};

struct LaunchEnv {
  // fmstack's rendezvous store (the supervisor's).
  std::string store_addr = "127.0.0.1";
  int store_port = 0;
  // The program's: where its rank 0 may start a store of its own.
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::string job_id;
  int64_t generation = 0;
  int restart_count = 0, max_restarts = 0;   // TORCHELASTIC_RESTART_COUNT, _MAX_RESTARTS
  std::map<std::string, std::string> extra;  // added to every worker's environment
  // Per node, when nodes live in network namespaces: the namespace to enter
  // and the address its workers listen on (FMSTACK_HOST).
  std::vector<std::string> node_netns, node_host;
  // Per node, when another program places the workers (srun for the Slurm
  // backend): the words before the worker's argv.
  std::vector<std::vector<std::string>> node_prefix;
};

// A TCP port on `addr` that nothing listens on now (the kernel's choice, as
// torchrun picks MASTER_PORT). Throws Error naming the address.
int FreeTcpPort(const std::string& addr);

// The environment of one worker, as "NAME=value" strings (inherited ones first).
std::vector<std::string> WorkerEnvironment(const LocalLayout& layout, const LaunchEnv& env,
                                           int rank);

// Forks and execs argv for every rank (node-major), each in its own process
// group (a Ctrl-C at the terminal reaches the supervisor only, which decides
// how the workers stop). With `control_fds` (one per rank), rank r's
// descriptor becomes its fd 3 and FMSTACK_CONTROL_FD=3. With `only`, just
// those ranks start (replacements for lost ones). Throws Error when a
// process cannot be started (after killing those already started).
std::vector<WorkerProcess> SpawnWorkers(const LocalLayout& layout, const LaunchEnv& env,
                                        const std::vector<std::string>& argv,
                                        const std::vector<int>& control_fds = {},
                                        const std::vector<int>& only = {});

// One helper process of a node (its health agent): argv with `env` added to
// this process's environment, in `netns` when not empty, `control_fd` as its
// fd 3 (when >= 0), stdout and stderr appended to `log_path`. It dies with
// the caller. Throws Error naming argv[0] and the cause.
pid_t SpawnNodeProcess(const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& env, const std::string& netns,
                       int control_fd, const std::string& log_path);

}  // namespace fmstack::cluster
