// The supervisor's node health: one `fmstack agent` per node slot (job nodes
// and spares), started in the slot's network namespace, reporting verdicts
// and device readings on a control channel. A failed check whose action is
// drain, reboot or replace takes its node out: the job's side is decided by
// resilience::Decide (an unhealthy-node event), the node's side here (drained
// with its reason; rebooted or replaced, then back in the pool). Operators'
// requests are in supervisor_node_ops.cc.
#include <fmt/format.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "health/agent.h"
#include "health/device.h"
#include "runtime/nodes.h"
#include "runtime/supervisor_impl.h"
#include "util/json_file.h"

namespace fmstack::runtime::internal {
namespace {

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string Supervisor::DevicesDir(int slot) const {
  return fmt::format("{}/nodes/{}/devices", o_.run_dir, SlotName(slot));
}

void Supervisor::StartAgents() {
  if (!o_.health.enabled) return;
  const int slots = o_.layout.nodes + o_.spares;
  health_.assign(static_cast<size_t>(slots), {});
  agents_.resize(static_cast<size_t>(slots));
  auto_actions_ = o_.health.auto_actions;
  std::filesystem::create_directories(o_.run_dir + "/nodes");
  for (int s = 0; s < slots; ++s) {
    if (o_.health.devices == "fake") ResetFakeDevices(s);
    StartAgent(s);
  }
  WriteNodes();
}

void Supervisor::ResetFakeDevices(int slot) {
  if (o_.health.devices == "fake")
    health::ResetFakeDevices(DevicesDir(slot), o_.layout.procs_per_node);
}

void Supervisor::StartAgent(int slot) {
  AgentProc& a = agents_[slot];
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw Error(
        fmt::format("socketpair for the agent of {}: {}", SlotName(slot), std::strerror(errno)));
  std::vector<std::string> argv = {o_.health.self_exe, "agent",     "--node",
                                   SlotName(slot),     "--run-dir", o_.run_dir};
  if (!o_.health.checks_file.empty()) {
    argv.push_back("--checks");
    argv.push_back(o_.health.checks_file);
  }
  argv.push_back("--devices");
  argv.push_back(o_.health.devices == "fake" ? "fake:" + DevicesDir(slot) : o_.health.devices);
  std::map<std::string, std::string> env;
  if (exporter_) env["FMSTACK_METRICS_TOKEN_FILE"] = o_.run_dir + "/metrics/token";
  std::string netns;
  env["FMSTACK_HOST"] = "127.0.0.1";  // the local backend's nodes share loopback
  if (network_) {
    env["FMSTACK_HOST"] = network_->node_addresses().at(static_cast<size_t>(slot));
    netns = network_->namespace_paths().at(static_cast<size_t>(slot));
  }
  try {
    a.pid = cluster::SpawnNodeProcess(
        argv, env, netns, sv[1], fmt::format("{}/logs/agent-{}.log", o_.run_dir, SlotName(slot)));
  } catch (...) {
    ::close(sv[0]);
    ::close(sv[1]);
    throw;
  }
  ::close(sv[1]);
  a.fd = sv[0];
  a.reader = LineReader();
  ++a.starts;
  SendPids(slot);
}

void Supervisor::AwaitBurnins() {
  // Start-up, the measurement and the verdict: twice the measured time
  // plus a margin for loading the program on a busy node.
  const auto budget = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(2 * o_.health.burnin_seconds + 10));
  const auto deadline = Clock::now() + budget;
  for (int s = 0; s < static_cast<int>(health_.size()); ++s) {
    const pid_t pid = health_[s].burnin_pid;
    if (pid <= 0) continue;
    Note(fmt::format("health: the job is done; waiting for {}'s burn-in to give its verdict",
                     SlotName(s)));
    while (health_[s].burnin_pid == pid) {
      int status = 0;
      const pid_t got = ::waitpid(pid, &status, WNOHANG);
      if (got == pid) {
        OnNodeProcessExit(pid, status);
        break;
      }
      if (got < 0 || Clock::now() >= deadline) {
        Note(fmt::format("health: {}'s burn-in gave no verdict within {:.0f} s; it stays drained",
                         SlotName(s), std::chrono::duration<double>(budget).count()));
        break;  // StopAgents ends it
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

void Supervisor::StopAgents() {
  for (SlotHealth& h : health_) {  // a repair under way ends with the run
    for (pid_t* pid : {&h.burnin_pid, &h.reboot_pid}) {
      if (*pid <= 0) continue;
      ::kill(-*pid, SIGKILL);
      ::waitpid(*pid, nullptr, 0);
      *pid = -1;
    }
  }
  for (AgentProc& a : agents_) {
    if (a.pid > 0) ::kill(a.pid, SIGKILL);
    if (a.fd >= 0) ::close(a.fd);
    a.fd = -1;
  }
  for (AgentProc& a : agents_) {
    if (a.pid > 0) ::waitpid(a.pid, nullptr, 0);  // SIGKILLed: returns at once
    a.pid = -1;
  }
}

bool Supervisor::OnNodeProcessExit(pid_t pid, int status) {
  for (int s = 0; s < static_cast<int>(agents_.size()); ++s) {
    AgentProc& a = agents_[s];
    if (a.pid != pid) continue;
    a.pid = -1;
    if (a.fd >= 0) ::close(a.fd);
    a.fd = -1;
    if (!a.endpoint.empty()) {
      a.endpoint.clear();
      WriteTargets();
    }
    // An agent is restarted (its liveness is a check of its own); one that
    // keeps dying is left down and said so.
    const std::string how = WIFSIGNALED(status)
                                ? fmt::format("killed by signal {}", WTERMSIG(status))
                                : fmt::format("exited {}", WEXITSTATUS(status));
    if (a.starts < 5) {
      a.restart_at = Clock::now() + std::chrono::seconds(1);
      Note(fmt::format("health agent of {} {} (see logs/agent-{}.log): restarting it", SlotName(s),
                       how, SlotName(s)));
    } else {
      a.restart_at = Clock::time_point::max();
      Note(fmt::format("health agent of {} {} for the {}th time: left down", SlotName(s), how,
                       a.starts));
    }
    return true;
  }
  for (int s = 0; s < static_cast<int>(health_.size()); ++s) {
    SlotHealth& h = health_[s];
    if (h.burnin_pid == pid) {
      h.burnin_pid = -1;
      h.repair.clear();
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        LogNodeEvent(s, "burnin-passed", "supervisor", "");
        ReturnToPool(s, "burn-in passed");
      } else {
        h.reason = fmt::format("burn-in failed ({}); see logs/burnin-{}.log",
                               WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status))
                                                 : fmt::format("signal {}", WTERMSIG(status)),
                               SlotName(s));
        Note(fmt::format("health: {}: {}; it stays drained", SlotName(s), h.reason));
        LogNodeEvent(s, "burnin-failed", "supervisor", h.reason);
        WriteNodes();
      }
      return true;
    }
    if (h.reboot_pid != pid) continue;

    h.reboot_pid = -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      NodeRepaired(s);
    } else {
      h.repair.clear();
      h.reason = fmt::format("reboot command failed ({}); see logs/reboot-{}.log",
                             WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status))
                                               : fmt::format("signal {}", WTERMSIG(status)),
                             SlotName(s));
      LogNodeEvent(s, "reboot-failed", "supervisor", h.reason);
      WriteNodes();
    }
    return true;
  }
  return false;
}

void Supervisor::TendAgents() {
  if (agents_.empty()) return;
  const auto now = Clock::now();
  for (int s = 0; s < static_cast<int>(agents_.size()); ++s) {
    if (agents_[s].pid < 0 && now >= agents_[s].restart_at) {
      try {
        StartAgent(static_cast<int>(s));
      } catch (const std::exception& e) {
        agents_[s].restart_at = now + std::chrono::seconds(5);
        Note(fmt::format("health agent of {}: {}", SlotName(static_cast<int>(s)), e.what()));
      }
    }
  }
  if (now >= next_node_ops_) {
    next_node_ops_ = now + std::chrono::milliseconds(200);
    HandleNodeOps();
  }
}

void Supervisor::PollAgents(std::span<const pollfd> fds) {
  char buf[16384];
  for (size_t s = 0; s < fds.size() && s < agents_.size(); ++s) {
    AgentProc& a = agents_[s];
    if (fds[s].revents == 0 || a.fd < 0) continue;
    const ssize_t n = ::read(a.fd, buf, sizeof buf);
    if (n <= 0) {
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      ::close(a.fd);  // the process's exit is reaped (and it restarted) by Reap
      a.fd = -1;
      continue;
    }
    std::vector<std::string> lines;
    try {
      lines = a.reader.Feed(buf, static_cast<size_t>(n));
    } catch (const std::exception& e) {
      Note(fmt::format("health agent of {}: {}; killed", SlotName(static_cast<int>(s)), e.what()));
      ::kill(a.pid, SIGKILL);
      continue;
    }
    for (const std::string& line : lines) {
      if (const std::optional<nlohmann::json> m = ParseLine(line))
        OnAgentMessage(static_cast<int>(s), *m);
    }
  }
}

void Supervisor::SendPids(int slot) {
  if (agents_.empty() || agents_[slot].fd < 0) return;
  nlohmann::json pids = nlohmann::json::object();
  const int node = JobNodeOn(slot);
  if (node >= 0) {
    for (const int r : RanksOf(node)) {
      if (r < static_cast<int>(workers_.size()) && alive_[r])
        pids[std::to_string(r)] = workers_[r].pid;
    }
  }
  SendLine(agents_[slot].fd, {{"cmd", "pids"}, {"pids", pids}});
}

int Supervisor::JobNodeOn(int slot) const {
  for (int n = 0; n < o_.layout.nodes; ++n) {
    if (slot_[n] == slot && !dropped_[n]) return n;
  }
  return -1;
}

bool Supervisor::SlotHealthy(int slot) const {
  if (health_.empty()) return true;
  const SlotHealth& h = health_[slot];
  return h.admin.empty() && h.failing.empty();
}

std::string Supervisor::NodeState(int slot) const {
  const SlotHealth& h = health_[slot];
  if (JobNodeOn(slot) >= 0) return h.admin == "drain" ? "draining" : "allocated";
  if (h.admin == "drain") return "drained";  // a reboot or replacement may be under way
  if (std::find(spares_.begin(), spares_.end(), slot) != spares_.end()) return "idle";
  return "down";
}

void Supervisor::OnAgentMessage(int slot, const nlohmann::json& m) {
  SlotHealth& h = health_[slot];
  const std::string ev = m.value("ev", "");
  if (ev == "hello") {  // the agent serves its own /metrics: scrape it too
    const std::string endpoint = m.value("metrics", "");
    if (endpoint.size() < 64 && endpoint.find_first_not_of("0123456789.:") == std::string::npos) {
      agents_[slot].endpoint = endpoint;
      WriteTargets();
    }
    return;
  }
  if (ev == "devices") {
    if (m["devices"].is_array() && m["devices"].size() <= 64) h.devices = m["devices"];
    return;
  }
  if (ev != "verdict") return;
  health::Verdict v;
  try {
    v = health::VerdictFromJson(m);
  } catch (const std::exception& e) {
    Note(fmt::format("health agent of {}: {}", SlotName(slot), e.what()));
    return;
  }
  const bool acts = v.action != resilience::NodeAction::kNone;
  if (v.ok) {
    if (h.failing.erase(v.check) > 0) {
      LogNodeEvent(slot, "check-passed", "agent:" + v.check, v.reason);
      WriteNodes();
    }
    return;
  }
  const bool first = !h.failing.contains(v.check);
  if (acts) h.failing[v.check] = v.reason;
  if (first) {
    Note(fmt::format("health: {} failed {} ({}, {}): {}", SlotName(slot), v.check,
                     health::SeverityName(v.severity), resilience::NodeActionName(v.action),
                     v.reason));
    LogNodeEvent(slot, "check-failed", "agent:" + v.check,
                 fmt::format("{} ({} -> {})", v.reason, health::SeverityName(v.severity),
                             resilience::NodeActionName(v.action)));
  }
  if (!acts) {
    WriteNodes();
    return;
  }
  // Act once per failure: on a node that is up (allocated or idle); the
  // agent repeats the verdict, so a node resumed while still failing goes
  // out again.
  if (!h.admin.empty() || !h.repair.empty()) {
    WriteNodes();
    return;
  }
  const std::string reason = "fmstack: " + v.reason;
  if (!auto_actions_) {
    if (first)
      Note(fmt::format("health: automatic actions are off: would {} {} ({})",
                       resilience::NodeActionName(v.action), SlotName(slot), reason));
    WriteNodes();
    return;
  }
  ActOnNode(slot, v.action, reason, "agent:" + v.check);
}

void Supervisor::ActOnNode(int slot, resilience::NodeAction action, const std::string& reason,
                           const std::string& by) {
  SlotHealth& h = health_[slot];
  const int node = JobNodeOn(slot);
  if (node < 0) {  // idle, or already out: no job is involved
    TakeOut(slot, action, reason, by);
    return;
  }
  if (decision_) {
    Note(
        fmt::format("health: {} needs {} but a recovery is under way; it is acted on when the "
                    "agent reports again",
                    SlotName(slot), resilience::NodeActionName(action)));
    h.failing.clear();  // so that the repeated verdict counts as new
    return;
  }
  const std::string what =
      fmt::format("{} (slot {}, job node {}) needs {}: {} [{}]", SlotName(slot), slot, node,
                  resilience::NodeActionName(action), reason, by);
  Detect({{.kind = resilience::EventKind::kNodeUnhealthy,
           .rank = node * o_.layout.procs_per_node,
           .step = monitor_ ? monitor_->MaxStep() : 0,
           .node_action = action},
          what});
  if (slot_[node] != slot || dropped_[node] ||
      (decision_ && decision_->verb == resilience::Verb::kStop)) {
    TakeOut(slot, action, reason, by);
    return;
  }
  if (!decision_) {  // carry on: the node stays until the job can leave it
    h.admin = "drain";
    h.reason = reason;
    h.by = by;
    h.since = UnixNow();
    LogNodeEvent(slot, "draining", by, reason + "; the job keeps it until it can leave");
  } else {
    // No spare: the node is rebooted or replaced in place while the job restarts.
    ResetFakeDevices(slot);
    h.failing.clear();
    LogNodeEvent(slot, std::string(resilience::NodeActionName(action)) + "-in-place", by, reason);
  }
  WriteNodes();
}

void Supervisor::TakeOut(int slot, resilience::NodeAction action, const std::string& reason,
                         const std::string& by) {
  SlotHealth& h = health_[slot];
  std::erase(spares_, slot);
  h.admin = "drain";
  h.reason = reason;
  h.by = by;
  h.since = UnixNow();
  repairs_.erase(slot);
  const std::string name = SlotName(slot);
  if (action == resilience::NodeAction::kReboot || action == resilience::NodeAction::kReplace) {
    h.repair = std::string(resilience::NodeActionName(action));
    const double seconds = action == resilience::NodeAction::kReboot ? o_.health.reboot_seconds
                                                                     : o_.health.replace_seconds;
    if (action == resilience::NodeAction::kReboot && !o_.health.reboot_command.empty()) {
      try {
        h.reboot_pid = cluster::SpawnNodeProcess(
            {"/bin/sh", "-c", o_.health.reboot_command},
            {{"FMSTACK_NODE", name}, {"FMSTACK_NODE_SLOT", std::to_string(slot)}}, "", -1,
            fmt::format("{}/logs/reboot-{}.log", o_.run_dir, name));
      } catch (const std::exception& e) {
        h.repair.clear();
        h.reason += fmt::format("; reboot command failed to start: {}", e.what());
      }
    } else {
      repairs_[slot] =
          Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1e3));
    }
  }
  Note(fmt::format("health: {} drained ({}){}", name, reason,
                   h.repair.empty() ? ": it stays out until `fmstack node resume`"
                                    : fmt::format(": {} under way", h.repair)));
  LogNodeEvent(slot, h.repair.empty() ? "drain" : h.repair, by, reason);
  WriteNodes();
}

void Supervisor::NodeRepaired(int slot) {
  SlotHealth& h = health_[slot];
  if (network_) network_->SetLink(slot, true);
  ResetFakeDevices(slot);
  h.failing.clear();
  if (o_.health.burnin_expect.empty()) {
    ReturnToPool(slot, h.repair.empty() ? "repaired" : h.repair + " done");
    return;
  }
  StartBurnin(slot);
}

void Supervisor::StartBurnin(int slot) {
  SlotHealth& h = health_[slot];
  const std::string name = SlotName(slot);
  const std::string done = h.repair.empty() ? "repaired" : h.repair + " done";
  // A lone node's burn-in: no rank, no store, one thread.
  std::map<std::string, std::string> env = {
      {"OMP_NUM_THREADS", "1"}, {"WORLD_SIZE", ""}, {"RANK", ""}, {"FMSTACK_RUN", ""}};
  std::string netns;
  if (network_) netns = network_->namespace_paths().at(static_cast<size_t>(slot));
  try {
    h.burnin_pid = cluster::SpawnNodeProcess(
        {o_.health.self_exe, "burnin", "--expect", o_.health.burnin_expect, "--tolerance",
         fmt::format("{}", o_.health.burnin_tolerance), "--seconds",
         fmt::format("{}", o_.health.burnin_seconds)},
        env, netns, -1, fmt::format("{}/logs/burnin-{}.log", o_.run_dir, name));
    h.repair = "burn-in";
    Note(fmt::format("health: {} {}: burn-in before it returns to the pool", name, done));
    LogNodeEvent(slot, "burnin", "supervisor", done);
  } catch (const std::exception& e) {
    h.repair.clear();
    h.reason = fmt::format("burn-in could not start: {}", e.what());
    LogNodeEvent(slot, "burnin-failed", "supervisor", h.reason);
  }
  WriteNodes();
}

void Supervisor::ReturnToPool(int slot, const std::string& what) {
  SlotHealth& h = health_[slot];
  h = {.devices = h.devices};  // back in service: only the newest reading stays
  if (std::find(spares_.begin(), spares_.end(), slot) == spares_.end()) spares_.push_back(slot);
  Note(fmt::format("health: {} {}: back in the pool of free slots ({} free)", SlotName(slot), what,
                   spares_.size()));
  LogNodeEvent(slot, "returned", "supervisor", what);
  WriteNodes();
}

void Supervisor::LogNodeEvent(int slot, const std::string& action, const std::string& by,
                              const std::string& reason) const {
  const nlohmann::json e = {{"time", UnixNow()}, {"node", SlotName(slot)},
                            {"action", action},  {"by", by},
                            {"reason", reason},  {"state", NodeState(slot)}};
  std::ofstream out(o_.run_dir + "/nodes/events.jsonl", std::ios::app);
  out << e.dump() << "\n";
}

void Supervisor::WriteNodes() const {
  if (health_.empty()) return;
  nlohmann::json nodes = nlohmann::json::array();
  const auto now = Clock::now();
  for (size_t s = 0; s < health_.size(); ++s) {
    const SlotHealth& h = health_[s];
    const int slot = static_cast<int>(s);
    const int node = JobNodeOn(slot);
    nlohmann::json failing = nlohmann::json::object();
    for (const auto& [check, reason] : h.failing) failing[check] = reason;
    nlohmann::json n = {
        {"name", SlotName(slot)},
        {"slot", slot},
        {"state", NodeState(slot)},
        {"job_node", node},
        {"ranks", node >= 0 ? nlohmann::json(RanksOf(node)) : nlohmann::json::array()},
        {"reason", h.reason},
        {"by", h.by},
        {"since", h.since},
        {"repair", h.repair},
        {"failing", failing},
        {"devices", h.devices.is_array() ? h.devices.size() : 0},
        {"agent", agents_[s].pid > 0 ? "up" : "down"}};
    if (const auto it = repairs_.find(slot); it != repairs_.end())
      n["back_in_s"] = std::max(0.0, Since(now, it->second));
    nodes.push_back(n);
  }
  WriteJsonFile(o_.run_dir + "/nodes.json",
                {{"updated", UnixNow()}, {"auto_actions", auto_actions_}, {"nodes", nodes}});
}

void Supervisor::PublishNodes() {
  if (!registry_ || health_.empty()) return;
  metrics::Registry& m = *registry_;
  for (const char* name :
       {"fmstack_node_state", "fmstack_health_check_failing", "fmstack_health_agent_up"})
    m.Clear(name);  // states come and go: no stale series
  for (int s = 0; s < static_cast<int>(health_.size()); ++s) {
    const SlotHealth& h = health_[s];
    const std::string node = SlotName(s);
    m.Set("fmstack_node_state", {{"node", node}, {"state", NodeState(s)}}, 1);
    m.Set("fmstack_health_agent_up", {{"node", node}}, agents_[s].pid > 0 ? 1 : 0);
    for (const auto& [check, reason] : h.failing)
      m.Set("fmstack_health_check_failing", {{"node", node}, {"check", check}}, 1);
  }
}

}  // namespace fmstack::runtime::internal
