// runtime: fault injection into a live run, for tests and for users who
// rehearse their recovery policy. `fmstack fault inject RUN_DIR ...` drops a
// request file into RUN_DIR/control/; the run's supervisor picks it up,
// waits until the target rank completed the requested step, and carries it
// out: with a signal (crash, hang), on disk (corrupt-checkpoint), on the
// network (network-cut), itself (supervisor-restart, notice), or by telling
// the worker (exit, stall, straggler, nan, bitflip, disk-full,
// kill-during-save).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fmstack::runtime {

struct InjectRequest {
  std::string id;  // unique within the run; fired ids are never fired again
  std::string kind;
  int rank = 0;
  int64_t at_step = 0;  // once the rank completed this step (0 = at once)
};

// Kinds the worker carries out itself, on a command from the supervisor.
bool IsWorkerKind(const std::string& kind);
// Kinds raised on the rank's (fake) accelerator, for its node's health agent
// to find: xid-79, xid-48, xid-13, ecc-dbe, gpu-hot, gpu-lost.
bool IsDeviceKind(const std::string& kind);
// The fake device edit for a device kind (health::RaiseOnFakeDevice).
nlohmann::json DeviceChange(const std::string& kind);

// What a live run publishes about itself in RUN_DIR/run.json.
struct RunInfo {
  int pid = 0;
  int world = 0, nodes = 0, procs_per_node = 0;
  bool netns = false;
  std::string job, state;  // state: "running", "finished", "failed", "stopped"
};
void WriteRunInfo(const std::string& run_dir, const RunInfo& info);
// Throws Error naming the file when it is missing or malformed.
RunInfo ReadRunInfo(const std::string& run_dir);

// `fmstack fault inject`: checks the run is live, the rank exists and the
// kind is known, then writes the request. Throws Error saying which.
std::string RequestInjection(const std::string& run_dir, const InjectRequest& request);

// Supervisor: takes (reads and removes) the pending request files. A
// malformed one is removed and described in `errors`.
std::vector<InjectRequest> TakeRequests(const std::string& run_dir,
                                        std::vector<std::string>* errors);

// Flips one byte in the tensor data of `rank`'s shard of the newest
// committed step under `tier_root` saved at or before `at_most_step`.
// Returns the file changed; throws Error when there is no such step.
std::string CorruptNewestShard(const std::string& tier_root, int rank, int64_t at_most_step);

// Whether the newest step directory under `tier_root` saved at or before
// `at_most_step` is committed: false while that save is still on its way
// to disk, and when nothing was saved yet. corrupt-checkpoint waits for it,
// so that it corrupts the checkpoint the rank saved last before the fault
// rather than an older one, or none (under load a save commits a few steps
// after the step that made it, while the next save may already have begun).
bool NewestCheckpointCommitted(const std::string& tier_root, int64_t at_most_step);

}  // namespace fmstack::runtime
