// cli: `fmstack report RUN_DIR --vs-sim JOB`: a real run's goodput ledger
// beside what `fmstack sim` predicts for the same job under the same fault
// load, played by the same policy (resilience::OnFault). The simulator is
// given what describes the job, measured in the run's fault-free steps (the
// step time, a save's blocking time), and the fault load the run met (each
// kind of incident as a fault cause at the rate it happened); what
// recovery costs comes from the job's own model ([resilience] restart,
// peer_rebuild, heartbeat_timeout, node_repair), which bench/recovery.sh
// measures on its own jobs, never from this run's recoveries. So the
// comparison checks the model, not a fit to the run.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "metrics/goodput.h"
#include "spec/job_spec.h"

namespace fmstack::cli {

struct VsSim {
  nlohmann::json json;  // both sides, bucket by bucket
  std::string text;     // the same as a table
};

// `trials` seeds of the simulator (common random numbers, seed 1).
VsSim CompareWithSim(const metrics::Ledger& ledger, const spec::JobSpec& job, int trials);

}  // namespace fmstack::cli
