// cli: what `fmstack run` and `train` check before any worker starts (the
// job's data and this machine's memory), said once with the fix.
#include <fmt/format.h>

#include <exception>
#include <string>

#include "cli/commands.h"
#include "health/checks.h"
#include "util/error.h"
#include "util/units.h"
#include "workload/memory.h"
#include "workload/shape.h"

namespace fmstack::cli {

void RequireDataDir(const spec::JobSpec& job) {
  if (job.data.dir.empty()) {
    throw SpecError(job.PosOf("data"), "data.dir",
                    "not set: run `fmstack data prepare --out DIR` and set [data] dir = \"DIR\"");
  }
}

std::string MemoryAvailableText() {
  try {
    return units::FormatBytes(health::MemInfoBytes("MemAvailable")) +
           " of memory is available on this machine (MemAvailable)";
  } catch (const std::exception&) {
    return "the memory available is unknown (no /proc/meminfo)";
  }
}

void RequireMemory(const spec::JobSpec& job, int64_t processes, int64_t dp) {
  const double params = static_cast<double>(workload::CountParams(job.model).total);
  // A lower bound of what one trainer process holds: fp32 weights and
  // gradients, both AdamW moments (sharded by ZeRO), and what the forward
  // pass keeps for backward. The trainer holds more (buckets, staging).
  const double moments = 8 * params / (job.layout.zero_stage > 0 ? static_cast<double>(dp) : 1.0);
  const double state = 8 * params + moments;
  const double activations = workload::ReferenceTrainerActivationBytes(
      job.model, job.train.micro_batch, job.model.seq_len);
  const double needed = static_cast<double>(processes) * (state + activations);
  double available = 0;
  try {
    available = health::MemInfoBytes("MemAvailable");
  } catch (const std::exception&) {
    return;  // not Linux's /proc: nothing to check against
  }
  if (needed <= available) return;
  throw SpecError(
      job.PosOf("model"), "model",
      fmt::format("the job needs at least {} of memory on this machine and {} is available: {} "
                  "process(es) x ({} of weights, gradients and optimizer state for {} parameters "
                  "+ {} of activations for micro_batch {} x seq_len {})",
                  units::FormatBytes(needed), units::FormatBytes(available), processes,
                  units::FormatBytes(state), units::FormatCount(params),
                  units::FormatBytes(activations), job.train.micro_batch, job.model.seq_len) +
          "; use a smaller model or train.micro_batch, fewer processes on this machine, or ZeRO "
          "(parallel.zero_stage) to shard the optimizer state");
}

}  // namespace fmstack::cli
