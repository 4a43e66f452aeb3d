// The supervisor's state that outlives one process: run.json, the restart
// history and ledger a re-executed supervisor continues (supervisor.json),
// the ledger a rerun of the directory continues (goodput.json), and a Slurm
// requeue booked as an incident.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/supervisor_impl.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_file.h"

namespace fmstack::runtime::internal {

void Supervisor::WriteInfo(const std::string& state) const {
  WriteRunInfo(o_.run_dir, {static_cast<int>(::getpid()), o_.layout.world(), o_.layout.nodes,
                            o_.layout.procs_per_node, o_.netns, o_.job_name, state});
}

void Supervisor::SaveState() const {
  nlohmann::json j;
  j["restarts"] = history_.restarts;
  j["last_nonfinite_step"] = history_.last_nonfinite_step;
  j["futile_restarts"] = history_.futile_restarts;
  j["max_restore_step"] = max_restore_step_;
  j["slurm_requeues"] = slurm_requeues_;
  j["fired"] = fired_;
  j["ledger"] = result_.ledger.ToJson();
  const std::string text = j.dump(1) + "\n";
  AtomicFileWriter w(o_.run_dir + "/supervisor.json");
  w.Write(text.data(), text.size());
  w.Commit();
}

void Supervisor::LoadState() {
  const std::string path = o_.run_dir + "/supervisor.json";
  if (!std::filesystem::exists(path)) return;  // the first attempt saved nothing yet
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    Note(fmt::format("supervisor: {} unreadable; the restarted supervisor starts a fresh ledger",
                     path));
    return;
  }
  history_.restarts = j.value("restarts", 0);
  history_.last_nonfinite_step = j.value("last_nonfinite_step", int64_t{-1});
  history_.futile_restarts = j.value("futile_restarts", 0);
  max_restore_step_ = j.value("max_restore_step", int64_t{-1});
  slurm_requeues_ = j.value("slurm_requeues", 0);
  for (const std::string& id : j.value("fired", std::vector<std::string>{})) fired_.insert(id);
  try {
    result_.ledger = metrics::Ledger::FromJson(j.value("ledger", nlohmann::json::object()));
  } catch (const std::exception& e) {
    Note(fmt::format("supervisor: the ledger in {} is malformed ({}); starting a fresh one", path,
                     e.what()));
  }
  // The incident that restarted the supervisor recovers in this attempt.
  if (!result_.ledger.incidents().empty() &&
      result_.ledger.incidents().back().recovery_seconds < 0) {
    recovering_ = result_.ledger.incidents().size() - 1;
    detected_at_ = start_;  // the exec in between is a few milliseconds
  }
  // The wall time of the supervisor before the restart is the ledger's so far.
}

void Supervisor::ContinueLedger() {
  const std::string path = o_.run_dir + "/goodput.json";
  if (!std::filesystem::exists(path)) return;   // the directory's first run
  constexpr size_t kMaxLedgerBytes = 64 << 20;  // a million incidents' worth
  try {
    result_.ledger = metrics::Ledger::FromJson(ReadJsonFile(path, kMaxLedgerBytes));
    wall_before_ = result_.ledger.wall();
  } catch (const std::exception& e) {
    Note(fmt::format("the earlier runs' ledger is unreadable ({}); this run starts a fresh one",
                     e.what()));
  }
}

void Supervisor::NoteRequeue() {
  slurm_requeues_ = o_.slurm.restart_count;
  const std::string what = fmt::format(
      "Slurm requeued job {} (restart {}): a node of the allocation, or its batch host with the "
      "supervisor, was lost",
      o_.slurm.job_id, o_.slurm.restart_count);
  Note(what);
  result_.ledger.incidents().push_back(
      {.kind = "requeue",
       .step = 0,  // the lost supervisor's last step is not known here
       .at = 0,
       .decision = "restart: a new supervisor continues the run in the new allocation; the "
                   "workers resume from the newest checkpoint",
       .what = what});
  recovering_ = result_.ledger.incidents().size() - 1;
  detected_at_ = start_;  // Slurm's own delay before the requeue is not counted
  ++history_.restarts;
  SaveState();
}

}  // namespace fmstack::runtime::internal
