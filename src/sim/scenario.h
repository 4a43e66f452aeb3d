// sim: from a job file to a Scenario - the step time from the step model,
// checkpoint sizes and tier times from the cluster's storage, fault rates
// from the catalog's fault set or the spec, the interval by Young/Daly.
// Every number the simulation rests on is kept in ScenarioInfo so that the
// report can show where it came from.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "resilience/job_model.h"
#include "resilience/policy.h"
#include "sim/cluster_sim.h"
#include "sim/step_model.h"
#include "sim/topology.h"
#include "spec/job_spec.h"

namespace fmstack::sim {

struct ScenarioOptions {
  double horizon_seconds = 0;  // 0: until the job's tokens are trained, else 30 days
  std::optional<resilience::Strategy> strategy;  // overrides [resilience] policy
  std::optional<int64_t> spares;                 // overrides cluster.spares
  StepOptions step;
  NetworkOptions network;
  bool timeline = false;
};

struct ScenarioInfo {
  StepTime step;
  int64_t steps = 0;                 // optimizer steps to train the job's tokens; 0 = not set
  double checkpoint_bytes = 0;       // whole job
  double state_per_node = 0;         // what a replacement node must receive from peers
  double mtti = 0;                   // job, unexpected faults only
  double drain = 0;                  // slowest tier's write time: the interval's floor
  std::string interval_rule;         // "auto: Daly" / "auto: drain time" / "spec"
  std::string fault_source;          // fault set name and source, or "spec"
  resilience::NodesAway nodes_away;  // in repair or maintenance at once, against the spares
};

struct BuiltScenario {
  Scenario scenario;
  ScenarioInfo info;
};

// Throws SpecError naming the job file when it has no cluster, and Error
// when the catalog lacks what the model needs.
BuiltScenario MakeScenario(const spec::JobSpec& job, const catalog::Catalog& catalog,
                           const ScenarioOptions& options = {});

}  // namespace fmstack::sim
