#include "cluster/local.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "util/blas_env.h"
#include "util/error.h"

extern char** environ;

namespace fmstack::cluster {
namespace {

std::map<std::string, std::string> InheritedEnvironment() {
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  DropBlasCoreSetByFmstack(vars);
  return vars;
}

// Forks and execs argv with exactly `env`: stdout and stderr onto out_fd and
// err_fd, control_fd (when >= 0) as fd 3, in the network namespace at
// `netns` (when not null), in a process group of its own, killed when the
// caller dies. Returns the pid, or -1 with *exec_errno saying why.
pid_t ForkExec(const std::vector<std::string>& argv, const std::vector<std::string>& env,
               const char* netns, int out_fd, int err_fd, int control, int* exec_errno) {
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  int status[2];
  if (::pipe2(status, O_CLOEXEC) != 0) {
    *exec_errno = errno;
    return -1;
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the supervisor
    if (::getppid() != parent) ::_exit(127);
    if (netns != nullptr) {
      const int fd = ::open(netns, O_RDONLY | O_CLOEXEC);
      if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
        const int e = errno;
        (void)!::write(status[1], &e, sizeof e);
        ::_exit(127);
      }
    }
    ::setpgid(0, 0);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    if (control == 3) {
      ::fcntl(3, F_SETFD, 0);  // dup2 onto itself would keep close-on-exec
    } else if (control >= 0) {
      ::dup2(control, 3);
    }
    ::execvpe(cargv[0], cargv.data(), cenv.data());
    const int e = errno;
    (void)!::write(status[1], &e, sizeof e);
    ::_exit(127);
  }
  ::close(status[1]);
  *exec_errno = pid < 0 ? errno : 0;
  const bool failed = pid < 0 || ::read(status[0], exec_errno, sizeof *exec_errno) > 0;
  ::close(status[0]);
  return failed ? -1 : pid;
}

}  // namespace

int FreeTcpPort(const std::string& addr) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1)
    throw Error(fmt::format("cannot pick a MASTER_PORT on '{}': not an IPv4 address", addr));
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t len = sizeof sa;
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!ok)
    throw Error(fmt::format("cannot pick a MASTER_PORT on {}: {}", addr, std::strerror(err)));
  return ntohs(sa.sin_port);
}

std::vector<std::string> WorkerEnvironment(const LocalLayout& layout, const LaunchEnv& env,
                                           int rank) {
  const int node = rank / layout.procs_per_node, local = rank % layout.procs_per_node;
  std::map<std::string, std::string> vars = InheritedEnvironment();
  // Each worker gets an equal share of the cores, as torchrun sets
  // OMP_NUM_THREADS, unless the user chose a number.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const unsigned share = std::max(1u, cores / static_cast<unsigned>(layout.world()));
  if (!vars.contains("OMP_NUM_THREADS")) vars["OMP_NUM_THREADS"] = std::to_string(share);
  vars["RANK"] = std::to_string(rank);
  vars["WORLD_SIZE"] = std::to_string(layout.world());
  vars["LOCAL_RANK"] = std::to_string(local);
  vars["LOCAL_WORLD_SIZE"] = std::to_string(layout.procs_per_node);
  vars["NODE_RANK"] = std::to_string(node);
  vars["GROUP_RANK"] = std::to_string(node);
  vars["GROUP_WORLD_SIZE"] = std::to_string(layout.nodes);
  vars["MASTER_ADDR"] = env.master_addr;
  vars["MASTER_PORT"] = std::to_string(env.master_port);
  vars["TORCHELASTIC_RUN_ID"] = env.job_id;
  vars["TORCHELASTIC_RESTART_COUNT"] = std::to_string(env.restart_count);
  vars["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(env.max_restarts);
  // The workers start their own store at MASTER_PORT; the agent's is not theirs.
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  vars["ROLE_NAME"] = "default";
  vars["FMSTACK_STORE_ADDR"] = env.store_addr;
  vars["FMSTACK_STORE_PORT"] = std::to_string(env.store_port);
  vars["FMSTACK_JOB_ID"] = env.job_id;
  vars["FMSTACK_GENERATION"] = std::to_string(env.generation);
  vars["FMSTACK_NODES"] = std::to_string(layout.nodes);
  vars["FMSTACK_RUN"] = "1";
  vars["FMSTACK_SLOT"] = std::to_string(rank);  // the launch place, kept when RANK is remapped
  if (!env.node_host.empty()) vars["FMSTACK_HOST"] = env.node_host[node];
  for (const auto& [k, v] : env.extra) vars[k] = v;
  // One role: its ranks are the group's, whatever an elastic remap made them.
  vars["ROLE_RANK"] = vars["RANK"];
  vars["ROLE_WORLD_SIZE"] = vars["WORLD_SIZE"];
  std::vector<std::string> out;
  for (const auto& [k, v] : vars) out.push_back(k + "=" + v);
  return out;
}

std::vector<WorkerProcess> SpawnWorkers(const LocalLayout& layout, const LaunchEnv& env,
                                        const std::vector<std::string>& argv,
                                        const std::vector<int>& control_fds,
                                        const std::vector<int>& only) {
  if (argv.empty()) throw Error("no worker command to run");
  std::vector<int> ranks = only;
  if (ranks.empty()) {
    for (int r = 0; r < layout.world(); ++r) ranks.push_back(r);
  }
  std::vector<WorkerProcess> workers;
  auto kill_started = [&] {
    for (const WorkerProcess& w : workers) {
      ::kill(w.pid, SIGKILL);
      ::close(w.out_fd);
      ::close(w.err_fd);
    }
  };
  for (const int rank : ranks) {
    if (rank < 0 || rank >= layout.world())
      throw Error(
          fmt::format("cannot start rank {}: the job has ranks 0..{}", rank, layout.world() - 1));
    std::vector<std::string> envs = WorkerEnvironment(layout, env, rank);
    const int control = control_fds.empty() ? -1 : control_fds.at(static_cast<size_t>(rank));
    if (control >= 0) envs.push_back("FMSTACK_CONTROL_FD=3");
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      kill_started();
      throw Error(fmt::format("cannot create pipes for rank {}: {}", rank, std::strerror(errno)));
    }
    const int node = rank / layout.procs_per_node;
    const char* netns = env.node_netns.empty() ? nullptr : env.node_netns[node].c_str();
    std::vector<std::string> words = argv;
    if (!env.node_prefix.empty()) {
      words = env.node_prefix.at(static_cast<size_t>(node));
      words.insert(words.end(), argv.begin(), argv.end());
    }
    int exec_errno = 0;
    const pid_t pid = ForkExec(words, envs, netns, out[1], err[1], control, &exec_errno);
    ::close(out[1]);
    ::close(err[1]);
    if (pid < 0) {
      ::close(out[0]);
      ::close(err[0]);
      kill_started();
      throw Error(
          fmt::format("cannot start rank {}: {}: {}", rank, words[0], std::strerror(exec_errno)));
    }
    workers.push_back(
        {rank, rank / layout.procs_per_node, rank % layout.procs_per_node, pid, out[0], err[0]});
  }
  return workers;
}

pid_t SpawnNodeProcess(const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& env, const std::string& netns,
                       int control_fd, const std::string& log_path) {
  if (argv.empty()) throw Error("no node process command to run");
  std::map<std::string, std::string> vars = InheritedEnvironment();
  for (const auto& [k, v] : env) vars[k] = v;
  if (control_fd >= 0) vars["FMSTACK_CONTROL_FD"] = "3";
  std::vector<std::string> envs;
  for (const auto& [k, v] : vars) envs.push_back(k + "=" + v);
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0)
    throw Error(fmt::format("cannot open {} for {}: {}", log_path, argv[0], std::strerror(errno)));
  int exec_errno = 0;
  const pid_t pid = ForkExec(argv, envs, netns.empty() ? nullptr : netns.c_str(), log, log,
                             control_fd, &exec_errno);
  ::close(log);
  if (pid < 0) throw Error(fmt::format("cannot start {}: {}", argv[0], std::strerror(exec_errno)));
  return pid;
}

}  // namespace fmstack::cluster
