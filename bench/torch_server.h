// A PyTorch peer that stays up between rounds (bench/torch_gpt.py --serve).
//
// Why: on a shared VM the machine's speed changes for seconds to minutes at a
// time. A peer started afresh for each round costs its start-up every time,
// so rounds have to be long and few, and one slow patch can land on one
// side's round and not the other's. Kept up, the peer can run rounds of a
// step or two, alternated with fmstack's many times, and each pair of
// neighbouring rounds shares the machine's state.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

extern char** environ;

namespace fmstack::bench {

class TorchServer {
 public:
  // Starts `argv` (its stderr folded into stdout) with `extra_env` added to
  // this process's environment, and waits up to `deadline_s` for its ready
  // line. On failure, says why on std::cerr with the peer's output, and
  // returns nullopt.
  static std::optional<TorchServer> Start(const std::vector<std::string>& argv,
                                          const std::vector<std::string>& extra_env,
                                          double deadline_s) {
    TorchServer s;
    if (!s.Spawn(argv, extra_env)) return std::nullopt;
    const std::optional<nlohmann::json> ready = s.ReadJson(deadline_s, "its ready line");
    if (!ready || !ready->value("ready", false)) return std::nullopt;
    s.about_ = *ready;
    return s;
  }

  TorchServer(TorchServer&& o) noexcept
      : pid_(std::exchange(o.pid_, -1)),
        to_(std::exchange(o.to_, -1)),
        from_(std::exchange(o.from_, -1)),
        pending_(std::move(o.pending_)),
        log_(std::move(o.log_)),
        about_(std::move(o.about_)) {}
  TorchServer& operator=(TorchServer&&) = delete;
  TorchServer(const TorchServer&) = delete;
  TorchServer& operator=(const TorchServer&) = delete;

  // End of input asks the peer to exit; it gets 10 s before SIGKILL.
  ~TorchServer() {
    if (to_ >= 0) ::close(to_);
    if (from_ >= 0) ::close(from_);
    if (pid_ <= 0) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (::waitpid(pid_, nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > until) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        return;
      }
      ::usleep(10000);
    }
  }

  // The ready line: torch version, BLAS, threads, allocator.
  const nlohmann::json& about() const { return about_; }

  // Trains `steps` steps in the peer and returns the seconds it timed, or
  // nullopt (said on std::cerr) when it failed or missed `deadline_s`.
  std::optional<double> Round(int steps, double deadline_s) {
    const std::string line = fmt::format("{}\n", steps);
    if (::write(to_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      std::cerr << fmt::format("PyTorch peer (pid {}): could not send a round: {}\n", pid_,
                               std::strerror(errno));
      return std::nullopt;
    }
    const std::optional<nlohmann::json> j =
        ReadJson(deadline_s, fmt::format("the end of a {}-step round", steps));
    if (!j || !j->contains("seconds")) return std::nullopt;
    return j->at("seconds").get<double>();
  }

 private:
  TorchServer() = default;

  bool Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
      std::cerr << "PyTorch peer: pipe: " << std::strerror(errno) << "\n";
      return false;
    }
    // Everything the child needs is built before fork: after it, only
    // async-signal-safe calls.
    // An inherited variable of the same name is left out: the dynamic
    // loader takes the last LD_PRELOAD it finds, so an empty one in this
    // process's environment would drop the peer's allocator.
    std::vector<std::string> env_strings(extra_env);
    const auto overridden = [&](std::string_view entry) {
      return std::any_of(extra_env.begin(), extra_env.end(), [&](const std::string& x) {
        const size_t eq = x.find('=');
        return entry.substr(0, entry.find('=')) == std::string_view(x).substr(0, eq);
      });
    };
    for (char** e = environ; *e != nullptr; ++e) {
      if (!overridden(*e)) env_strings.emplace_back(*e);
    }
    std::vector<char*> envp, args;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> arg_strings(argv);
    for (std::string& a : arg_strings) args.push_back(a.data());
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(out[1], 2);
      ::execve(args[0], args.data(), envp.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = out[0];
    if (pid_ < 0) {
      std::cerr << "PyTorch peer: fork: " << std::strerror(errno) << "\n";
      return false;
    }
    return true;
  }

  // The next line that is a JSON object; other lines (warnings) are kept
  // for the error message.
  std::optional<nlohmann::json> ReadJson(double deadline_s, const std::string& awaited) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadline_s);
    for (;;) {
      if (const size_t nl = pending_.find('\n'); nl != std::string::npos) {
        std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        if (!line.empty() && line.front() == '{') {
          nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
          if (!j.is_discarded()) return j;
        }
        if (log_.size() < 64 * 1024) log_ += line + "\n";
        continue;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return Fail(fmt::format("no {} within {:.0f} s", awaited, deadline_s));
      pollfd p{from_, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
      if (ready < 0 && errno != EINTR) return Fail(fmt::format("poll: {}", std::strerror(errno)));
      if (ready <= 0) continue;
      char buf[4096];
      const ssize_t n = ::read(from_, buf, sizeof(buf));
      if (n == 0) return Fail(fmt::format("exited before {}", awaited));
      if (n < 0 && errno != EINTR && errno != EAGAIN)
        return Fail(fmt::format("read: {}", std::strerror(errno)));
      if (n > 0) pending_.append(buf, static_cast<size_t>(n));
      if (pending_.size() > 1024 * 1024) return Fail("a line of more than 1 MiB");
    }
  }

  std::nullopt_t Fail(const std::string& why) {
    std::cerr << fmt::format("PyTorch peer (pid {}): {}; its output:\n{}{}\n", pid_, why, log_,
                             pending_);
    return std::nullopt;
  }

  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string pending_, log_;
  nlohmann::json about_;
};

}  // namespace fmstack::bench
