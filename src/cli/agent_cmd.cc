// `fmstack agent`: the health agent of one node. Under `fmstack run` (one per
// node slot) it reports verdicts and device readings to the supervisor on its
// control channel; by hand, `fmstack agent --once` runs every check once and
// prints a table, and without --once it prints each verdict as it changes.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "health/agent.h"
#include "health/node_metrics.h"
#include "metrics/exporter.h"
#include "runtime/control.h"
#include "util/error.h"
#include "util/program.h"
#include "util/strict_table.h"
#include "util/text_table.h"

namespace fmstack::cli {
namespace {

struct AgentArgs {
  std::string checks, devices = "none", node, run_dir = ".";
  bool once = false, json = false, print_checks = false, slurm_drain = false;
};

// Slurm's side of a failed check: the node is drained with the reason, so
// the scheduler places nothing new on it (a running job may finish).
bool DrainInSlurm(const std::string& node, const std::vector<health::Verdict>& verdicts) {
  std::string reason;
  for (const health::Verdict& v : verdicts) {
    if (v.ok || v.action == resilience::NodeAction::kNone) continue;
    reason += (reason.empty() ? "" : "; ") + v.reason;
  }
  if (reason.empty()) return true;
  reason = ("fmstack: " + reason).substr(0, 200);
  const ProgramResult r =
      RunProgram({"scontrol", "update", "nodename=" + node, "state=drain", "reason=" + reason}, 10);
  if (!r.ok) {
    std::cerr << fmt::format("fmstack agent: scontrol could not drain {} ({}): {}\n", node, r.how,
                             r.output.substr(0, r.output.find('\n')));
    return false;
  }
  std::cout << fmt::format("drained {} in Slurm: {}\n", node, reason);
  return true;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string ResultOf(const health::Verdict& v) {
  if (v.ok) return "ok";
  return v.timed_out ? "TIMEOUT" : "FAIL";
}

int Once(health::Agent& agent, const std::vector<health::CheckSpec>& checks, bool json,
         bool slurm_drain) {
  const std::vector<health::Verdict> verdicts = health::RunAllOnce(checks, agent.node());
  bool critical = false;
  nlohmann::json out = nlohmann::json::array();
  TextTable t({"CHECK", "KIND", "RESULT", "SEVERITY", "ACTION", "SECONDS", "DETAIL"},
              {TextTable::Align::kLeft, TextTable::Align::kLeft, TextTable::Align::kLeft,
               TextTable::Align::kLeft, TextTable::Align::kLeft, TextTable::Align::kRight,
               TextTable::Align::kLeft});
  for (const health::Verdict& v : verdicts) {
    critical |= !v.ok && v.severity == health::Severity::kCritical;
    out.push_back(health::ToJson(v));
    t.AddRow({v.check, v.kind, ResultOf(v), std::string(health::SeverityName(v.severity)),
              std::string(resilience::NodeActionName(v.action)), fmt::format("{:.3f}", v.seconds),
              v.reason});
  }
  if (json) {
    std::cout << out.dump(1) << "\n";
  } else {
    std::cout << fmt::format("node {}: {} checks, devices {}\n", agent.node().name, verdicts.size(),
                             agent.node().devices->Describe())
              << t.RenderText();
  }
  if (slurm_drain && !DrainInSlurm(agent.node().name, verdicts)) return 2;
  return critical ? 1 : 0;
}

// The node's own /metrics (when the run serves metrics): devices, host and
// checks, on the node's address, behind the run's bearer token.
struct NodeEndpoint {
  metrics::Registry registry;
  std::unique_ptr<metrics::Exporter> exporter;
};

std::unique_ptr<NodeEndpoint> StartEndpoint(int fd) {
  const char* token_file = std::getenv("FMSTACK_METRICS_TOKEN_FILE");
  if (token_file == nullptr) return nullptr;
  std::string token = ReadTextFile(token_file);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  const char* host = std::getenv("FMSTACK_HOST");
  auto e = std::make_unique<NodeEndpoint>();
  health::DeclareNodeSeries(e->registry);
  e->exporter = std::make_unique<metrics::Exporter>(e->registry,
                                                    host != nullptr ? host : "127.0.0.1", 0, token);
  runtime::SendLine(fd,
                    {{"ev", "hello"},
                     {"metrics", fmt::format("{}:{}", e->exporter->host(), e->exporter->port())}});
  return e;
}

// Under the supervisor: verdicts and readings out, the node's worker pids in.
int Serve(health::Agent& agent, int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  runtime::LineReader reader;
  double next_reading = 0;
  const std::unique_ptr<NodeEndpoint> endpoint = StartEndpoint(fd);
  for (;;) {
    const double now = Now();
    for (const health::Verdict& v : agent.Tick(now)) {
      nlohmann::json m = health::ToJson(v);
      m["ev"] = "verdict";
      if (!runtime::SendLine(fd, m)) return 0;  // the supervisor is gone
    }
    if (now >= next_reading) {
      next_reading = now + 2;
      if (std::optional<std::vector<health::DeviceState>> read = agent.Readings(now)) {
        if (endpoint)
          health::PublishNodeSeries(endpoint->registry, agent.node().name, *read, agent.Current(),
                                    agent.node().run_dir);
        nlohmann::json devices = nlohmann::json::array();
        for (const health::DeviceState& d : *read) devices.push_back(health::ToJson(d));
        if (!runtime::SendLine(fd, {{"ev", "devices"}, {"devices", devices}})) return 0;
      }
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) return 0;
    if (n < 0) continue;
    for (const std::string& line : reader.Feed(buf, static_cast<size_t>(n))) {
      const std::optional<nlohmann::json> m = runtime::ParseLine(line);
      if (!m || m->value("cmd", "") != "pids" || !(*m)["pids"].is_object()) continue;
      std::map<int, int> pids;
      for (const auto& [rank, pid] : (*m)["pids"].items()) {
        if (pid.is_number_integer() && pids.size() < 4096) pids[std::stoi(rank)] = pid.get<int>();
      }
      agent.SetPids(std::move(pids));
    }
  }
}

int Watch(health::Agent& agent) {
  std::cout << fmt::format("fmstack agent on {}: watching (Ctrl-C to stop)\n", agent.node().name)
            << std::flush;
  for (;;) {
    for (const health::Verdict& v : agent.Tick(Now()))
      std::cout << fmt::format("{} {} [{} {} -> {}] {}\n", ResultOf(v), v.check,
                               health::SeverityName(v.severity), v.kind,
                               resilience::NodeActionName(v.action), v.reason)
                << std::flush;
    ::usleep(100000);
  }
}

int RunAgent(const AgentArgs& a) {
  if (a.print_checks) {
    std::cout << health::DefaultCheckTableText();
    return 0;
  }
  const std::vector<health::CheckSpec> checks =
      a.checks.empty() ? health::ParseCheckTable(health::DefaultCheckTableText(), "<built-in>")
                       : health::ParseCheckTable(ReadTextFile(a.checks), a.checks);
  health::NodeContext node;
  node.name = a.node;
  if (node.name.empty()) {
    char host[256] = {};
    node.name = ::gethostname(host, sizeof host - 1) == 0 ? host : "localhost";
  }
  node.run_dir = a.run_dir;
  if (const char* host = std::getenv("FMSTACK_HOST")) node.host = host;
  node.devices = health::OpenDevices(a.devices);
  node.expect_devices = node.devices->Count();
  health::Agent agent(checks, std::move(node));
  if (a.slurm_drain && !a.once) throw Error("--slurm-drain goes with --once");
  if (a.once) return Once(agent, checks, a.json, a.slurm_drain);
  if (const char* fd = std::getenv(runtime::kControlFdEnv)) return Serve(agent, std::atoi(fd));
  return Watch(agent);
}

}  // namespace

Runner AddAgentCommand(CLI::App& app) {
  auto a = std::make_shared<AgentArgs>();
  CLI::App* cmd = app.add_subcommand(
      "agent",
      "a node's health agent: runs the check table (accelerators, NIC, disk, memory, "
      "clock, processes), each under its deadline");
  cmd->add_option("--checks", a->checks, "check table (TOML); default: the built-in one")
      ->check(ExistingFile());
  cmd->add_option("--devices", a->devices, "accelerators: none, nvml or fake:DIR");
  cmd->add_option("--node", a->node, "this node's name (default: the host name)");
  cmd->add_option("--run-dir", a->run_dir, "the disk check's default path");
  cmd->add_flag("--once", a->once,
                "run every check once, print a table, exit 1 on a critical "
                "failure");
  cmd->add_flag("--json", a->json, "with --once: the verdicts as JSON");
  cmd->add_flag("--slurm-drain", a->slurm_drain,
                "with --once: drain this node in Slurm (scontrol) when a check that asks for an "
                "action fails; for Slurm's HealthCheckProgram (deploy/slurm/)");
  cmd->add_flag("--print-checks", a->print_checks, "print the built-in check table and exit");
  return [a] { return RunAgent(*a); };
}

}  // namespace fmstack::cli
