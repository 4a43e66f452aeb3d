// `fmstack node list|drain|resume|reboot|replace|auto RUN_DIR ...`: the
// nodes of a live run with health agents, and operators' actions on them.
// Names are nodeN (N = the node slot) or lists such as node[0-3],node7; at
// most 25 nodes per action; --dry-run says what would happen and changes
// nothing.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "runtime/inject.h"
#include "runtime/nodes.h"
#include "util/error.h"
#include "util/text_table.h"

namespace fmstack::cli {
namespace {

struct NodeArgs {
  std::string run_dir, reason;
  std::vector<std::string> nodes;
  bool json = false, dry_run = false;
  double timeout = 30;
};

int List(const NodeArgs& a) {
  const nlohmann::json j = runtime::ReadNodes(a.run_dir);
  if (a.json) {
    std::cout << j.dump(1) << "\n";
    return 0;
  }
  const runtime::RunInfo info = runtime::ReadRunInfo(a.run_dir);
  using A = TextTable::Align;
  TextTable t({"NODE", "STATE", "REPAIR", "JOB NODE", "RANKS", "AGENT", "REASON", "FAILING CHECKS"},
              {A::kLeft, A::kLeft, A::kLeft, A::kRight, A::kLeft, A::kLeft, A::kLeft, A::kLeft});
  for (const nlohmann::json& n : j["nodes"]) {
    std::string ranks;
    for (const nlohmann::json& r : n["ranks"]) ranks += (ranks.empty() ? "" : ",") + r.dump();
    std::string failing;
    for (const auto& [check, why] : n["failing"].items())
      failing += (failing.empty() ? "" : "; ") + check;
    std::string repair = n.value("repair", "");
    if (!repair.empty() && n.contains("back_in_s"))
      repair += fmt::format(", back in {:.0f} s", n["back_in_s"].get<double>());
    const int job_node = n.value("job_node", -1);
    t.AddRow({n.value("name", "?"), n.value("state", "?"), repair.empty() ? "-" : repair,
              job_node >= 0 ? std::to_string(job_node) : "-", ranks.empty() ? "-" : ranks,
              n.value("agent", "?"), n.value("reason", "").empty() ? "-" : n.value("reason", ""),
              failing.empty() ? "-" : failing});
  }
  std::cout << fmt::format("run {} ({}), automatic node actions {}\n", info.job, info.state,
                           j.value("auto_actions", true) ? "on" : "off")
            << t.RenderText();
  return 0;
}

std::string DryRun(const nlohmann::json& nodes, const std::string& op, const std::string& name) {
  for (const nlohmann::json& n : nodes["nodes"]) {
    if (n.value("name", "") != name) continue;
    const std::string state = n.value("state", "?");
    const int job_node = n.value("job_node", -1);
    if ((op == "reboot" || op == "replace") && job_node >= 0)
      return fmt::format("refused: {} runs job node {}; drain it first", name, job_node);
    if (op == "drain" && job_node >= 0)
      return fmt::format(
          "would drain {} ({}): the resilience policy moves job node {} to a spare, shrinks "
          "around it, or lets it finish there",
          name, state, job_node);
    return fmt::format("would {} {} (now {})", op, name, state);
  }
  return fmt::format("refused: no node {}", name);
}

int Act(const std::string& op, const NodeArgs& a) {
  runtime::NodeOp req;
  req.op = op;
  req.nodes = runtime::ExpandNodeNames(a.nodes);
  req.reason = a.reason;
  if (a.dry_run) {
    if (req.nodes.size() > runtime::kMaxNodesPerAction)
      throw Error(fmt::format("{} nodes in one {}: at most {} per batch action", req.nodes.size(),
                              op, runtime::kMaxNodesPerAction));
    const nlohmann::json nodes = runtime::ReadNodes(a.run_dir);
    for (const std::string& n : req.nodes) std::cout << DryRun(nodes, op, n) << "\n";
    std::cout << "dry run: nothing was changed\n";
    return 0;
  }
  const std::string id = runtime::RequestNodeOp(a.run_dir, req);
  const nlohmann::json answer = runtime::AwaitNodeOp(a.run_dir, id, a.timeout);
  bool all_ok = true;
  for (const nlohmann::json& r : answer["results"]) {
    const bool ok = r.value("ok", false);
    all_ok &= ok;
    std::cout << fmt::format("{} {}: {}\n", r.value("node", "?"), ok ? op : op + " refused",
                             r.value("result", ""));
  }
  return all_ok ? 0 : 1;
}

int Auto(const std::string& state, const NodeArgs& a) {
  if (state != "on" && state != "off") throw Error("fmstack node auto RUN_DIR on|off");
  runtime::NodeOp req;
  req.op = "auto";
  req.reason = a.reason;
  req.enable = state == "on";
  if (a.dry_run) {
    std::cout << fmt::format("would turn automatic node actions {}\ndry run: nothing was changed\n",
                             state);
    return 0;
  }
  const std::string id = runtime::RequestNodeOp(a.run_dir, req);
  runtime::AwaitNodeOp(a.run_dir, id, a.timeout);
  std::cout << fmt::format("automatic node actions {}\n", state);
  return 0;
}

}  // namespace

Runner AddNodeCommand(CLI::App& app) {
  auto a = std::make_shared<NodeArgs>();
  auto auto_state = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "node",
      "the nodes of a live run with health agents: list them, drain, resume, reboot or "
      "replace up to 25 at a time");
  cmd->require_subcommand(1);
  CLI::App* list = cmd->add_subcommand("list", "every node slot: state, job node, ranks, reason");
  list->add_option("run_dir", a->run_dir, "the run's directory (its --out)")->required();
  list->add_flag("--json", a->json, "nodes.json as it is");
  std::vector<std::pair<std::string, CLI::App*>> acts;
  for (const char* op : {"drain", "resume", "reboot", "replace"}) {
    CLI::App* c = cmd->add_subcommand(
        op, fmt::format("{} nodes (nodeN, node[a-b], comma lists; at most 25)", op));
    c->add_option("run_dir", a->run_dir, "the run's directory (its --out)")->required();
    c->add_option("nodes", a->nodes, "node names")->required();
    c->add_option("--reason", a->reason, "why, for the event log");
    c->add_flag("--dry-run", a->dry_run, "say what would happen; change nothing");
    c->add_option("--timeout", a->timeout, "seconds to wait for the supervisor's answer")
        ->check(Positive());
    acts.emplace_back(op, c);
  }
  CLI::App* aut =
      cmd->add_subcommand("auto", "the kill switch: automatic actions on failed checks on or off");
  aut->add_option("run_dir", a->run_dir, "the run's directory (its --out)")->required();
  aut->add_option("state", *auto_state, "on or off")->required()->check(OneOf({"on", "off"}));
  aut->add_option("--reason", a->reason, "why, for the event log");
  aut->add_flag("--dry-run", a->dry_run, "say what would happen; change nothing");
  return [a, list, acts, aut, auto_state] {
    if (list->parsed()) return List(*a);
    if (aut->parsed()) return Auto(*auto_state, *a);
    for (const auto& [op, c] : acts) {
      if (c->parsed()) return Act(op, *a);
    }
    return 1;
  };
}

}  // namespace fmstack::cli
