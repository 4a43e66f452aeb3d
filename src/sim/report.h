// sim: what `fmstack sim` prints - the scenario and where its numbers came
// from, policies side by side with 95% ranges, interruptions by cause, JSON
// for scripts, and an SVG timeline a person can look at.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/monte_carlo.h"
#include "sim/scenario.h"
#include "spec/job_spec.h"

namespace fmstack::sim {

struct PolicyOutcome {
  std::string policy;
  TrialSummary summary;
  RunResult first;  // trial 0 with its timeline, for the plot
};

std::string RenderScenario(const spec::JobSpec& job, const BuiltScenario& built);
std::string RenderOutcomes(const Scenario& scenario, const std::vector<PolicyOutcome>& outcomes,
                           bool markdown);
std::string RenderCauses(const Scenario& scenario, const std::vector<PolicyOutcome>& outcomes,
                         bool markdown);
nlohmann::json OutcomesJson(const spec::JobSpec& job, const BuiltScenario& built,
                            const std::vector<PolicyOutcome>& outcomes, uint64_t seed);

// Trained work over wall time for each outcome's first trial, the ideal
// (fault-free) line, and a tick per fault coloured by cause family.
std::string TimelineSvg(const Scenario& scenario, const std::vector<PolicyOutcome>& outcomes,
                        const std::string& title);

}  // namespace fmstack::sim
