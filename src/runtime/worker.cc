#include "runtime/worker.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/control.h"
#include "runtime/control_tcp.h"
#include "util/error.h"

namespace fmstack::runtime {

namespace {

// Where the handlers of CoordinateSignals write: a signal handler reaches
// only process-wide state, and this is all of it (one coordinating Worker
// per process).
std::atomic<int> g_signal_write_fd{-1};

void ForwardSignal(int sig) {
  const int saved = errno;
  const int fd = g_signal_write_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const unsigned char b = static_cast<unsigned char>(sig);
    (void)!::write(fd, &b, 1);
  }
  errno = saved;
}

int64_t IntEnv(const char* name) {
  const char* v = std::getenv(name);
  char* end = nullptr;
  const long long n = v != nullptr ? std::strtoll(v, &end, 10) : 0;
  if (v == nullptr || end == v || *end != '\0' || n < 0 || n > (int64_t{1} << 40))
    throw Error(fmt::format("{} is set, but {} is {}", kControlAddrEnv, name,
                            v == nullptr ? "missing" : fmt::format("'{}'", v)));
  return n;
}

}  // namespace

std::unique_ptr<Worker> Worker::FromEnv(std::chrono::milliseconds heartbeat_interval) {
  if (const char* addr = std::getenv(kControlAddrEnv)) {
    const char* secret = std::getenv("FMSTACK_STORE_SECRET");
    if (secret == nullptr)
      throw Error(fmt::format("{} is set, but FMSTACK_STORE_SECRET is missing", kControlAddrEnv));
    const int fd = DialControl(addr, secret, static_cast<int>(IntEnv("FMSTACK_SLOT")),
                               IntEnv("FMSTACK_GENERATION"), std::chrono::seconds(30));
    auto w = std::make_unique<Worker>(fd, heartbeat_interval);
    w->lifeline_ = true;
    return w;
  }
  const char* fd = std::getenv(kControlFdEnv);
  int n = -1;
  if (fd != nullptr) {
    char* end = nullptr;
    const long v = std::strtol(fd, &end, 10);
    if (end != fd && *end == '\0' && v >= 0 && v < 65536) n = static_cast<int>(v);
  }
  return std::make_unique<Worker>(n, heartbeat_interval);
}

Worker::Worker(int fd, std::chrono::milliseconds heartbeat_interval)
    : fd_(fd), interval_(heartbeat_interval) {
  if (fd_ < 0) return;
  thread_ = std::thread([this] { Loop(); });
}

Worker::~Worker() {
  if (fd_ < 0) return;
  for (const auto& [sig, old] : saved_handlers_) ::sigaction(sig, &old, nullptr);
  if (!saved_handlers_.empty()) g_signal_write_fd = -1;
  stop_ = true;
  thread_.join();
  for (const int fd : signal_pipe_) {
    if (fd >= 0) ::close(fd);
  }
}

void Worker::CoordinateSignals() {
  if (fd_ < 0 || signal_pipe_[0] >= 0) return;
  if (::pipe2(signal_pipe_, O_CLOEXEC | O_NONBLOCK) != 0)
    throw Error(fmt::format("worker: a pipe for termination signals: {}", std::strerror(errno)));
  signal_read_ = signal_pipe_[0];
  g_signal_write_fd = signal_pipe_[1];
  struct sigaction sa {};
  sa.sa_handler = &ForwardSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (const int sig : kCoordinatedSignals) {
    struct sigaction old {};
    ::sigaction(sig, &sa, &old);
    saved_handlers_.emplace_back(sig, old);
  }
}

void Worker::OnSignals() {
  // The supervisor sends "terminate" before its own SIGTERM: read what the
  // channel holds before telling the scheduler's signal from ours.
  pollfd q{fd_, POLLIN, 0};
  if (::poll(&q, 1, 0) > 0 && (q.revents & POLLIN) != 0 && !ReadCommands()) return;
  unsigned char sigs[16];
  const ssize_t n = ::read(signal_read_, sigs, sizeof sigs);
  for (ssize_t i = 0; i < n; ++i) {
    const int sig = sigs[i];
    if (terminate_) {
      ::signal(sig, SIG_DFL);
      ::raise(sig);  // ends the process, as if no handler had been installed
    }
    Send({{"ev", "signal"}, {"sig", sig}});
    if (reported_.insert(sig).second) {
      const std::string m = fmt::format(
          "fmstack: SIG{} received: the supervisor coordinates the stop (an emergency "
          "checkpoint of the current step first)\n",
          sigabbrev_np(sig));
      (void)!::write(2, m.data(), m.size());
    }
  }
}

void Worker::Progress(int64_t step, std::string_view phase) {
  if (fd_ < 0) return;
  bool changed;
  {
    const std::lock_guard lock(mu_);
    changed = phase_ != phase;
    phase_ = phase;
    step_ = step;
  }
  // A new phase is news at once: the supervisor times phases (restore, save).
  if (changed) Send({{"ev", "hb"}, {"step", step}, {"phase", std::string(phase)}});
}

void Worker::Send(nlohmann::json event) {
  if (fd_ < 0) return;
  const std::lock_guard lock(mu_);
  SendLine(fd_, event);
}

std::vector<nlohmann::json> Worker::TakeCommands() {
  const std::lock_guard lock(mu_);
  std::vector<nlohmann::json> taken, kept;
  for (nlohmann::json& c : commands_)
    (hooks_.contains(c.value("cmd", "")) ? kept : taken).push_back(std::move(c));
  commands_ = std::move(kept);
  return taken;
}

std::optional<nlohmann::json> Worker::WaitCommand(std::string_view cmd,
                                                  std::chrono::milliseconds timeout) {
  if (!active()) return std::nullopt;
  std::unique_lock lock(mu_);
  std::optional<nlohmann::json> found;
  arrived_.wait_for(lock, timeout, [&] {
    for (auto it = commands_.begin(); it != commands_.end(); ++it) {
      if (it->value("cmd", "") != cmd) continue;
      found = std::move(*it);
      commands_.erase(it);
      return true;
    }
    return closed_;
  });
  return found;
}

void Worker::OnArrival(std::string cmd, std::function<void(const nlohmann::json&)> fn) {
  const std::lock_guard lock(mu_);
  if (fn) {
    hooks_[std::move(cmd)] = std::move(fn);
  } else {
    hooks_.erase(cmd);
  }
}

void Worker::Close() {
  const std::lock_guard lock(mu_);
  closed_ = true;
  arrived_.notify_all();  // a WaitCommand returns at once
}

void Worker::Loop() {
  auto next_beat = std::chrono::steady_clock::now();
  while (!stop_) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_beat) {
      nlohmann::json beat;
      {
        const std::lock_guard lock(mu_);
        beat = {{"ev", "hb"}, {"step", step_.load()}, {"phase", phase_}};
        SendLine(fd_, beat);
      }
      next_beat = now + interval_;
    }
    // Wake often enough to notice stop_ promptly.
    const auto wait = std::min<std::chrono::milliseconds>(
        std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - now),
        std::chrono::milliseconds(100));
    pollfd p[2] = {{fd_, POLLIN, 0}, {signal_read_.load(), POLLIN, 0}};
    const int polled =
        ::poll(p, p[1].fd >= 0 ? 2 : 1, static_cast<int>(std::max<int64_t>(wait.count(), 1)));
    if (polled <= 0) continue;
    if (p[0].revents != 0 && !ReadCommands()) return;
    if (p[1].fd >= 0 && (p[1].revents & POLLIN) != 0) OnSignals();
  }
}

bool Worker::ReadCommands() {
  char buf[4096];
  const ssize_t n = ::read(fd_, buf, sizeof buf);
  if (n <= 0) {
    // A child of the supervisor dies with it (PDEATHSIG). A worker on
    // another host has this connection as its lifeline instead: the
    // supervisor closes it to kill the worker, and a supervisor that is
    // gone must not leave it running, holding the node.
    if (lifeline_) {
      const std::string m = "fmstack: the control connection to the supervisor closed: exiting\n";
      (void)!::write(2, m.data(), m.size());
      ::kill(::getpid(), SIGKILL);
    }
    Close();
    return false;
  }
  try {
    for (const std::string& line : reader_.Feed(buf, static_cast<size_t>(n))) {
      std::optional<nlohmann::json> cmd = ParseLine(line);
      if (!cmd) continue;
      if (cmd->value("cmd", "") == "terminate") terminate_ = true;
      std::function<void(const nlohmann::json&)> hook;
      {
        const std::lock_guard lock(mu_);
        if (auto it = hooks_.find(cmd->value("cmd", "")); it != hooks_.end()) hook = it->second;
      }
      if (hook) hook(*cmd);  // outside the lock: it may take the caller's locks
      const std::lock_guard lock(mu_);
      commands_.push_back(std::move(*cmd));
      arrived_.notify_all();
    }
  } catch (const std::exception&) {
    Close();  // a supervisor that breaks the protocol gets no more heartbeats
    return false;
  }
  return true;
}

}  // namespace fmstack::runtime
