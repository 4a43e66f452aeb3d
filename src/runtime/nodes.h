// runtime: the nodes of a live run as operators see them. The supervisor
// publishes every node slot's state in RUN_DIR/nodes.json and logs every
// action on a node (a health verdict acted on, an operator's drain, a
// reboot...) to RUN_DIR/nodes/events.jsonl. `fmstack node` reads the one and
// asks for actions through request files in RUN_DIR/control/, which the
// supervisor carries out and answers (nodeop-ID.done.json).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fmstack::runtime {

// At most this many nodes per batch action, as managed clusters allow.
inline constexpr size_t kMaxNodesPerAction = 25;

// "node1", "node[0-3]", "node[1,4-5]", comma lists of those. Throws Error
// naming the bad item; at most 4096 names.
std::vector<std::string> ExpandNodeNames(const std::vector<std::string>& items);

struct NodeOp {
  std::string id;
  std::string op;  // drain | resume | reboot | replace | auto
  std::vector<std::string> nodes;
  std::string reason;
  bool enable = true;  // op "auto": automatic actions on or off
};

// The live run's nodes.json (throws Error naming the file and what is wrong).
nlohmann::json ReadNodes(const std::string& run_dir);

// `fmstack node OP`: checks that the run is live, the op known, the batch at
// most kMaxNodesPerAction and every node in the run; writes the request and
// returns its id. Throws Error saying which check failed, with nothing written.
std::string RequestNodeOp(const std::string& run_dir, const NodeOp& op);
// Waits for the supervisor's answer to request `id`; throws Error naming the
// request and the deadline when none comes.
nlohmann::json AwaitNodeOp(const std::string& run_dir, const std::string& id, double seconds);

// Supervisor: takes the pending requests; a malformed one is removed and
// described in `errors`.
std::vector<NodeOp> TakeNodeOps(const std::string& run_dir, std::vector<std::string>* errors);
void AnswerNodeOp(const std::string& run_dir, const std::string& id, const nlohmann::json& answer);

}  // namespace fmstack::runtime
