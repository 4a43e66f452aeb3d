#include "util/program.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

extern char** environ;

namespace fmstack {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

ProgramResult RunProgram(const std::vector<std::string>& args, double deadline_seconds,
                         const std::map<std::string, std::string>& env, size_t max_output) {
  ProgramResult r;
  if (args.empty()) {
    r.how = "could not start: no program";
    return r;
  }
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    r.how = fmt::format("could not start: pipe: {}", std::strerror(errno));
    return r;
  }
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // Everything is built before fork: the child of a process with threads may
  // only make async-signal-safe calls until exec.
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view kv(*e);
    if (!env.contains(std::string(kv.substr(0, kv.find('='))))) env_strings.emplace_back(*e);
  }
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::setpgid(0, 0);
    ::execvpe(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out[1]);
  if (pid < 0) {
    ::close(out[0]);
    r.how = fmt::format("could not start: fork: {}", std::strerror(errno));
    return r;
  }
  const double until = Now() + deadline_seconds;
  char buf[4096];
  for (;;) {
    const double left = until - Now();
    if (left <= 0) break;
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) continue;
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    if (r.output.size() < max_output)
      r.output.append(buf, std::min(static_cast<size_t>(n), max_output - r.output.size()));
  }
  ::close(out[0]);
  int status = 0;
  pid_t done = ::waitpid(pid, &status, WNOHANG);
  while (done == 0 && Now() < until) {
    ::usleep(10000);
    done = ::waitpid(pid, &status, WNOHANG);
  }
  if (done == 0) {
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    r.timed_out = true;
    r.how = fmt::format("did not finish within {:.1f} s (deadline); killed", deadline_seconds);
    return r;
  }
  r.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  r.how = WIFEXITED(status) ? fmt::format("exited {}", WEXITSTATUS(status))
                            : fmt::format("killed by signal {}", WTERMSIG(status));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && r.output.empty())
    r.how = "could not start (not found?)";
  return r;
}

}  // namespace fmstack
