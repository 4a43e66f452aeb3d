#include "runtime/supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "cluster/netns.h"
#include "comm/tcp_store.h"
#include "util/error.h"

namespace fmstack::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Blocks SIGCHLD/SIGINT/SIGTERM for the supervisor's lifetime and reads them
// from a descriptor instead; the old mask comes back on destruction.
class SignalFd {
 public:
  SignalFd() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGCHLD, SIGINT, SIGTERM}) sigaddset(&set, s);
    sigprocmask(SIG_BLOCK, &set, &old_);
    fd_ = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd_ < 0) throw Error(fmt::format("signalfd: {}", std::strerror(errno)));
  }
  ~SignalFd() {
    ::close(fd_);
    sigprocmask(SIG_SETMASK, &old_, nullptr);
  }
  int fd() const { return fd_; }
  // The signals that arrived since the last call.
  std::vector<int> Take() {
    std::vector<int> out;
    signalfd_siginfo info;
    while (::read(fd_, &info, sizeof info) == sizeof info)
      out.push_back(static_cast<int>(info.ssi_signo));
    return out;
  }

 private:
  int fd_ = -1;
  sigset_t old_;
};

struct Stream {
  int rank;
  bool is_stderr;
  int fd;
  std::string pending;  // a partial line
};

}  // namespace

std::string ExitReason(const RankExit& e) {
  if (e.signal != 0) {
    const char* name = sigabbrev_np(e.signal);
    return fmt::format("was killed by SIG{}", name != nullptr ? name : std::to_string(e.signal));
  }
  return fmt::format("exited with status {}", e.exit_code);
}

std::string DescribeExit(const RankExit& e, const cluster::LocalLayout& layout) {
  return fmt::format("rank {} (node {}, local rank {}) {}", e.rank, e.rank / layout.procs_per_node,
                     e.rank % layout.procs_per_node, ExitReason(e));
}

RunResult Supervise(const SuperviseOptions& options, const EventFn& on_event,
                    const LineFn& on_line) {
  std::filesystem::create_directories(options.log_dir);
  SignalFd signals;
  std::unique_ptr<cluster::NodeNetwork> network;
  if (options.netns) network = std::make_unique<cluster::NodeNetwork>(options.layout.nodes);
  cluster::LaunchEnv env;
  if (network) {
    env.master_addr = network->bridge_address();
    env.node_netns = network->namespace_paths();
    env.node_host = network->node_addresses();
  }
  comm::TcpStoreServer store(env.master_addr, 0);
  env.master_port = store.port();
  env.job_id = options.job_id;
  env.extra = options.extra_env;
  env.extra["FMSTACK_LOG_DIR"] = options.log_dir;

  const auto start = Clock::now();
  std::vector<cluster::WorkerProcess> workers =
      cluster::SpawnWorkers(options.layout, env, options.argv);
  const int world = options.layout.world();
  std::vector<std::ofstream> logs(world);
  std::vector<Stream> streams;
  for (const auto& w : workers) {
    logs[w.rank].open(fmt::format("{}/rank{}.log", options.log_dir, w.rank), std::ios::trunc);
    streams.push_back({w.rank, false, w.out_fd, {}});
    streams.push_back({w.rank, true, w.err_fd, {}});
  }

  RunResult result;
  result.exits.resize(world);
  std::vector<bool> alive(world, true);
  int running = world;
  Clock::time_point term_at = Clock::time_point::max(), kill_at = Clock::time_point::max();
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(options.grace_seconds * 1000));

  auto deliver = [&](Stream& s, std::string_view data) {
    s.pending.append(data);
    size_t nl;
    while ((nl = s.pending.find('\n')) != std::string::npos) {
      const std::string line = s.pending.substr(0, nl);
      s.pending.erase(0, nl + 1);
      logs[s.rank] << line << '\n';
      if (!s.is_stderr && line.starts_with(kEventPrefix)) {
        if (on_event) on_event(s.rank, line.substr(std::strlen(kEventPrefix)));
      } else if (on_line) {
        on_line(s.rank, s.is_stderr, line);
      }
    }
    logs[s.rank].flush();
  };
  auto signal_all = [&](int sig) {
    for (const auto& w : workers) {
      if (alive[w.rank]) ::kill(w.pid, sig);
    }
  };
  auto reap = [&] {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (const auto& w : workers) {
        if (w.pid != pid) continue;
        RankExit& e = result.exits[w.rank];
        e.rank = w.rank;
        e.seconds = std::chrono::duration<double>(Clock::now() - start).count();
        if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
        if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
        alive[w.rank] = false;
        --running;
        const bool failed = e.signal != 0 || e.exit_code != 0;
        if (failed && result.failed_rank < 0 && !result.interrupted) {
          // First failure: tell the survivors whom to blame, then give them
          // the grace period to notice, report and exit on their own.
          result.failed_rank = w.rank;
          result.failure = DescribeExit(e, options.layout);
          store.Set(comm::FailureKey(env.generation), fmt::format("{} {}", w.rank, ExitReason(e)));
          term_at = Clock::now() + grace;
        }
      }
    }
  };

  char buf[65536];
  Clock::time_point drain_until = Clock::time_point::max();
  while (running > 0 || !streams.empty()) {
    std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
    for (const Stream& s : streams) fds.push_back({s.fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
    for (int sig : signals.Take()) {
      if (sig == SIGCHLD) continue;
      if (!result.interrupted) {
        result.interrupted = true;
        signal_all(SIGTERM);
        kill_at = Clock::now() + grace;
      } else {
        signal_all(SIGKILL);  // a second Ctrl-C means now
      }
    }
    reap();
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Stream& s = streams[i - 1];
      const ssize_t n = ::read(s.fd, buf, sizeof buf);
      if (n > 0) {
        deliver(s, std::string_view(buf, static_cast<size_t>(n)));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        if (!s.pending.empty()) deliver(s, "\n");
        ::close(s.fd);
        s.fd = -1;
      }
    }
    std::erase_if(streams, [](const Stream& s) { return s.fd < 0; });
    const auto now = Clock::now();
    if (running > 0 && now >= term_at) {
      signal_all(SIGTERM);
      term_at = Clock::time_point::max();
      kill_at = now + grace;
    }
    if (running > 0 && now >= kill_at) {
      signal_all(SIGKILL);
      kill_at = Clock::time_point::max();
    }
    // Workers are gone but something they started may still hold a pipe
    // open: drain for a moment, then stop listening.
    if (running == 0 && drain_until == Clock::time_point::max()) drain_until = now + grace;
    if (now >= drain_until) break;
  }
  for (const Stream& s : streams) ::close(s.fd);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

}  // namespace fmstack::runtime
