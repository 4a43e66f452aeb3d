#include "runtime/inject.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include "ckpt/format.h"
#include "util/error.h"
#include "util/json_file.h"

namespace fmstack::runtime {
namespace fs = std::filesystem;
namespace {

constexpr size_t kMaxRequestBytes = 4096;  // a request is a few fields

std::string ControlDir(const std::string& run_dir) {
  return run_dir + "/control";
}

}  // namespace

bool IsWorkerKind(const std::string& kind) {
  static const std::vector<std::string> kinds = {
      "exit",    "stall",     "straggler",        "nan",
      "bitflip", "disk-full", "kill-during-save", "corrupt-replica"};
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

bool IsDeviceKind(const std::string& kind) {
  return kind == "xid-79" || kind == "xid-48" || kind == "xid-13" || kind == "ecc-dbe" ||
         kind == "gpu-hot" || kind == "gpu-lost";
}

nlohmann::json DeviceChange(const std::string& kind) {
  if (kind.starts_with("xid-")) return {{"xid", std::stoi(kind.substr(4))}};
  if (kind == "ecc-dbe") return {{"ecc_dbe", 1}};
  if (kind == "gpu-hot") return {{"temperature_c", 95}};
  if (kind == "gpu-lost") return {{"present", false}};
  throw Error("not a device fault kind: " + kind);
}

void WriteRunInfo(const std::string& run_dir, const RunInfo& i) {
  WriteJsonFile(run_dir + "/run.json", {{"pid", i.pid},
                                        {"world", i.world},
                                        {"nodes", i.nodes},
                                        {"procs_per_node", i.procs_per_node},
                                        {"netns", i.netns},
                                        {"job", i.job},
                                        {"state", i.state}});
}

RunInfo ReadRunInfo(const std::string& run_dir) {
  const std::string path = run_dir + "/run.json";
  if (!fs::exists(path)) {
    throw Error(
        fmt::format("{}: not a run directory (no run.json; a run's directory is the "
                    "`--out` of `fmstack run`, runs/<job> by default)",
                    run_dir));
  }
  const nlohmann::json j = ReadJsonFile(path, 64 * 1024);
  try {
    RunInfo i;
    i.pid = j.at("pid");
    i.world = j.at("world");
    i.nodes = j.at("nodes");
    i.procs_per_node = j.at("procs_per_node");
    i.netns = j.at("netns");
    i.job = j.at("job");
    i.state = j.at("state");
    if (i.world < 1 || i.world > (1 << 20) || i.pid < 1) throw Error("world or pid out of range");
    return i;
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: malformed ({})", path, e.what()));
  }
}

std::string RequestInjection(const std::string& run_dir, const InjectRequest& r) {
  const RunInfo info = ReadRunInfo(run_dir);
  if (info.state != "running" || ::kill(info.pid, 0) != 0) {
    throw Error(fmt::format("{}: the run is not live (state \"{}\", supervisor pid {} {})", run_dir,
                            info.state, info.pid, ::kill(info.pid, 0) == 0 ? "alive" : "gone"));
  }
  // run.json survives a supervisor killed by SIGKILL, and its pid may be
  // another process's by now: the run is live only while its lock is held.
  if (const int fd = ::open((run_dir + "/run.lock").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      fd >= 0) {
    const bool free = ::flock(fd, LOCK_SH | LOCK_NB) == 0;
    ::close(fd);
    if (free)
      throw Error(
          fmt::format("{}: the run is not live (no `fmstack run` holds its run.lock; "
                      "pid {} is another process)",
                      run_dir, info.pid));
  }
  if (r.rank < 0 || r.rank >= info.world) {
    throw Error(
        fmt::format("--rank {}: the run {} has ranks 0..{}", r.rank, info.job, info.world - 1));
  }
  if (r.kind == "network-cut" && !info.netns) {
    throw Error(
        fmt::format("--kind network-cut: the run {} does not put its nodes in network "
                    "namespaces; start it with --netns (root) to cut a node's link",
                    info.job));
  }
  fs::create_directories(ControlDir(run_dir));
  std::random_device rd;
  const std::string id = fmt::format("cli-{}-{:08x}", ::getpid(), rd());
  WriteJsonFile(fmt::format("{}/inject-{}.json", ControlDir(run_dir), id),
                {{"id", id}, {"kind", r.kind}, {"rank", r.rank}, {"at_step", r.at_step}});
  return id;
}

std::vector<InjectRequest> TakeRequests(const std::string& run_dir,
                                        std::vector<std::string>* errors) {
  std::vector<InjectRequest> out;
  std::error_code ec;
  fs::directory_iterator it(ControlDir(run_dir), ec);
  if (ec) return out;
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : it) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("inject-") && name.ends_with(".json")) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    try {
      const nlohmann::json j = ReadJsonFile(p.string(), kMaxRequestBytes);
      InjectRequest r;
      r.id = j.at("id");
      r.kind = j.at("kind");
      r.rank = j.at("rank");
      r.at_step = j.at("at_step");
      out.push_back(r);
    } catch (const std::exception& e) {
      errors->push_back(
          fmt::format("fault injection request {} ignored: {}", p.string(), e.what()));
    }
    fs::remove(p, ec);
  }
  return out;
}

namespace {

// The newest step directory under tier_root saved at or before `at_most`,
// committed ones only when `committed`.
std::optional<fs::path> NewestStepDir(const std::string& tier_root, int64_t at_most,
                                      bool committed) {
  std::optional<fs::path> newest;
  int64_t newest_step = -1;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(tier_root, ec)) {
    const std::optional<int64_t> step = ckpt::ParseStepDirName(e.path().filename().string());
    if (!step || *step > at_most || *step <= newest_step) continue;
    if (committed && !fs::exists(e.path() / "COMMITTED", ec)) continue;
    newest = e.path();
    newest_step = *step;
  }
  return newest;
}

}  // namespace

bool NewestCheckpointCommitted(const std::string& tier_root, int64_t at_most_step) {
  const std::optional<fs::path> newest = NewestStepDir(tier_root, at_most_step, false);
  std::error_code ec;
  return newest && fs::exists(*newest / "COMMITTED", ec);
}

std::string CorruptNewestShard(const std::string& tier_root, int rank, int64_t at_most_step) {
  const std::optional<fs::path> newest = NewestStepDir(tier_root, at_most_step, true);
  std::error_code ec;
  if (!newest) {
    throw Error(fmt::format("{}: no committed checkpoint saved by step {} to corrupt", tier_root,
                            at_most_step));
  }
  const fs::path shard = *newest / fmt::format("rank-{:05d}.safetensors", rank);
  const auto size = fs::file_size(shard, ec);
  if (ec || size < 16) throw Error(fmt::format("{}: no shard to corrupt", shard.string()));
  // The last byte is tensor data: past the safetensors header and the
  // manifest's offsets, inside a checksummed chunk.
  std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(size - 1));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x01);
  f.seekp(static_cast<std::streamoff>(size - 1));
  f.write(&c, 1);
  f.flush();
  if (!f) throw Error(fmt::format("{}: could not flip a byte", shard.string()));
  return shard.string();
}

}  // namespace fmstack::runtime
