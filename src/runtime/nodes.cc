#include "runtime/nodes.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "runtime/inject.h"
#include "util/error.h"
#include "util/json_file.h"

namespace fmstack::runtime {
namespace fs = std::filesystem;
namespace {

constexpr size_t kMaxNames = 4096;

int64_t ParseIndex(const std::string& s, const std::string& item) {
  if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), ::isdigit))
    throw Error(fmt::format("node list \"{}\": \"{}\" is not a node number", item, s));
  return std::stoll(s);
}

}  // namespace

std::vector<std::string> ExpandNodeNames(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& arg : items) {
    // Split on commas outside brackets.
    std::vector<std::string> parts;
    std::string cur;
    int depth = 0;
    for (const char c : arg) {
      if (c == '[') ++depth;
      if (c == ']') --depth;
      if (c == ',' && depth == 0) {
        parts.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    parts.push_back(cur);
    for (const std::string& item : parts) {
      if (item.empty()) throw Error(fmt::format("node list \"{}\": an empty name", arg));
      const size_t open = item.find('[');
      if (open == std::string::npos) {
        out.push_back(item);
      } else {
        if (!item.ends_with("]"))
          throw Error(fmt::format("node list \"{}\": expected prefix[a-b,c]", item));
        const std::string prefix = item.substr(0, open);
        const std::string body = item.substr(open + 1, item.size() - open - 2);
        size_t start = 0;
        while (start <= body.size()) {
          const size_t comma = std::min(body.find(',', start), body.size());
          const std::string range = body.substr(start, comma - start);
          const size_t dash = range.find('-');
          const int64_t lo = ParseIndex(range.substr(0, dash), item);
          const int64_t hi =
              dash == std::string::npos ? lo : ParseIndex(range.substr(dash + 1), item);
          if (hi < lo || hi - lo >= static_cast<int64_t>(kMaxNames))
            throw Error(fmt::format("node list \"{}\": bad range \"{}\"", item, range));
          for (int64_t i = lo; i <= hi; ++i) out.push_back(prefix + std::to_string(i));
          start = comma + 1;
        }
      }
      if (out.size() > kMaxNames)
        throw Error(fmt::format("node list: more than {} names", kMaxNames));
    }
  }
  return out;
}

nlohmann::json ReadNodes(const std::string& run_dir) {
  const std::string path = run_dir + "/nodes.json";
  if (!fs::exists(path))
    throw Error(fmt::format(
        "{}: no node table (the run has no health agents: add a [health] table to the job, or "
        "pass --health to `fmstack run`)",
        path));
  nlohmann::json j = ReadJsonFile(path, 4 << 20);
  if (!j.contains("nodes") || !j["nodes"].is_array())
    throw Error(path + ": malformed (no \"nodes\" list)");
  return j;
}

std::string RequestNodeOp(const std::string& run_dir, const NodeOp& op) {
  static const std::vector<std::string> ops = {"drain", "resume", "reboot", "replace", "auto"};
  if (std::find(ops.begin(), ops.end(), op.op) == ops.end())
    throw Error(
        fmt::format("unknown node action \"{}\" (drain, resume, reboot, replace, auto)", op.op));
  if (op.nodes.size() > kMaxNodesPerAction)
    throw Error(fmt::format(
        "{} nodes in one {}: at most {} per batch action (split the list); nothing was done",
        op.nodes.size(), op.op, kMaxNodesPerAction));
  const RunInfo info = ReadRunInfo(run_dir);
  if (info.state != "running" || ::kill(info.pid, 0) != 0)
    throw Error(fmt::format("{}: the run is not live (state \"{}\"); nothing was done", run_dir,
                            info.state));
  const nlohmann::json nodes = ReadNodes(run_dir);
  std::set<std::string> known;
  std::vector<std::string> names;
  for (const nlohmann::json& n : nodes["nodes"]) {
    known.insert(n.value("name", ""));
    names.push_back(n.value("name", ""));
  }
  for (const std::string& n : op.nodes) {
    if (!known.contains(n))
      throw Error(fmt::format("node \"{}\" is not in run {} (its nodes: {}); nothing was done", n,
                              info.job, fmt::join(names, ", ")));
  }
  if (op.op != "auto" && op.nodes.empty()) throw Error("no node named: which nodes to " + op.op);
  fs::create_directories(run_dir + "/control");
  std::random_device rd;
  const std::string id = fmt::format("{}-{:08x}", ::getpid(), rd());
  WriteJsonFile(fmt::format("{}/control/nodeop-{}.json", run_dir, id), {{"id", id},
                                                                        {"op", op.op},
                                                                        {"nodes", op.nodes},
                                                                        {"reason", op.reason},
                                                                        {"enable", op.enable}});
  return id;
}

nlohmann::json AwaitNodeOp(const std::string& run_dir, const std::string& id, double seconds) {
  const std::string path = fmt::format("{}/control/nodeop-{}.done.json", run_dir, id);
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (std::chrono::steady_clock::now() < until) {
    if (fs::exists(path)) {
      nlohmann::json j = ReadJsonFile(path, 1 << 20);
      std::error_code ec;
      fs::remove(path, ec);
      return j;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw Error(fmt::format(
      "request {} was not answered by the run's supervisor within {:.0f} s (is it stuck? see "
      "{}/control/)",
      id, seconds, run_dir));
}

std::vector<NodeOp> TakeNodeOps(const std::string& run_dir, std::vector<std::string>* errors) {
  std::vector<NodeOp> out;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(run_dir + "/control", ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("nodeop-") && name.ends_with(".json") && !name.ends_with(".done.json"))
      files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    try {
      const nlohmann::json j = ReadJsonFile(p.string(), 64 * 1024);
      NodeOp op;
      op.id = j.at("id");
      op.op = j.at("op");
      op.nodes = j.at("nodes").get<std::vector<std::string>>();
      op.reason = j.value("reason", "");
      op.enable = j.value("enable", true);
      if (op.id.empty() || op.id.size() > 64 || op.reason.size() > 512 ||
          op.nodes.size() > kMaxNodesPerAction)
        throw Error("id, reason or node count out of bounds");
      // The id names the answer's file: letters, digits and '-' only.
      if (!std::all_of(op.id.begin(), op.id.end(),
                       [](char c) { return std::isalnum(c) || c == '-'; }))
        throw Error("id \"" + op.id + "\" has characters other than letters, digits and '-'");
      out.push_back(op);
    } catch (const std::exception& e) {
      errors->push_back(fmt::format("node request {} ignored: {}", p.string(), e.what()));
    }
    fs::remove(p, ec);
  }
  return out;
}

void AnswerNodeOp(const std::string& run_dir, const std::string& id, const nlohmann::json& answer) {
  WriteJsonFile(fmt::format("{}/control/nodeop-{}.done.json", run_dir, id), answer);
}

}  // namespace fmstack::runtime
