// The supervisor's side of `fmstack node`: operators' requests (drain,
// resume, reboot, replace, automatic actions on or off) taken from the run
// directory, applied to the node slots, and answered there. At most
// kMaxNodesPerAction nodes per request (runtime/nodes.h).
#include <fmt/format.h>

#include "runtime/nodes.h"
#include "runtime/supervisor_impl.h"

namespace fmstack::runtime::internal {

void Supervisor::HandleNodeOps() {
  std::vector<std::string> errors;
  for (const NodeOp& op : TakeNodeOps(o_.run_dir, &errors)) {
    nlohmann::json answer = {{"id", op.id}, {"op", op.op}, {"results", nlohmann::json::array()}};
    if (op.op == "auto") {
      auto_actions_ = op.enable;
      Note(fmt::format("health: automatic node actions turned {} by an operator",
                       op.enable ? "on" : "off"));
      for (size_t s = 0; s < health_.size(); ++s)
        LogNodeEvent(static_cast<int>(s), op.enable ? "auto-on" : "auto-off", "operator",
                     op.reason);
      answer["results"].push_back(
          {{"node", "*"},
           {"ok", true},
           {"result", op.enable ? "automatic actions on" : "automatic actions off"}});
    } else {
      for (const std::string& name : op.nodes) {
        std::string result;
        bool ok = false;
        try {
          result = ApplyNodeOp(op, name);
          ok = true;
        } catch (const std::exception& e) {
          result = e.what();
        }
        answer["results"].push_back({{"node", name}, {"ok", ok}, {"result", result}});
      }
    }
    WriteNodes();
    AnswerNodeOp(o_.run_dir, op.id, answer);
  }
  for (const std::string& e : errors) Note(e);
}

std::string Supervisor::ApplyNodeOp(const NodeOp& op, const std::string& name) {
  int slot = -1;
  for (size_t s = 0; s < health_.size(); ++s) {
    if (SlotName(static_cast<int>(s)) == name) slot = static_cast<int>(s);
  }
  if (slot < 0) throw Error(fmt::format("{}: no such node in this run", name));
  SlotHealth& h = health_[slot];
  const std::string reason = op.reason.empty() ? "operator" : "operator: " + op.reason;
  const int node = JobNodeOn(slot);
  if (op.op == "drain") {
    if (!h.admin.empty()) return fmt::format("already {} ({})", NodeState(slot), h.reason);
    ActOnNode(slot, resilience::NodeAction::kDrain, reason, "operator");
    return NodeState(slot);
  }
  if (op.op == "resume") {
    if (!h.repair.empty())
      throw Error(fmt::format("{}: {} is under way; it returns by itself", name, h.repair));
    if (h.admin.empty() && (node >= 0 || NodeState(slot) == "idle")) return "already up";
    repairs_.erase(slot);
    if (node >= 0) {               // a draining node that the job could not leave
      h = {.devices = h.devices};  // back in service: only the newest reading stays
    } else {  // the operator vouches for it: no burn-in; a check still failing drains it again
      if (network_) network_->SetLink(slot, true);
      ReturnToPool(slot, "resumed by an operator");
    }
    LogNodeEvent(slot, "resume", "operator", reason);
    return NodeState(slot);
  }
  // reboot / replace
  if (node >= 0)
    throw Error(
        fmt::format("{} runs job node {} (ranks {}): drain it first (`fmstack node drain`), "
                    "then {} it",
                    name, node, fmt::join(RanksOf(node), ","), op.op));
  if (!h.repair.empty()) return fmt::format("{} already under way", h.repair);
  TakeOut(slot, *resilience::ParseNodeAction(op.op), h.admin.empty() ? reason : h.reason,
          "operator");
  return NodeState(slot);
}

}  // namespace fmstack::runtime::internal
