// Each fault set in data/catalog/faults.toml, applied to the cluster its
// source trained on, gives back the interruption interval the source
// reports: Llama 3's 419 in 54 days on 2,048 hosts, OPT-175B's "~2 machines
// a day" on 124, BLOOM's GPU "every week or so" on 48. The job files are the
// validation cases of the same runs, so the sets are checked on the layouts
// `fmstack validate` times.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "catalog/catalog.h"
#include "resilience/job_model.h"
#include "sim/monte_carlo.h"
#include "sim/scenario.h"
#include "spec/job_spec.h"

namespace fmstack::sim {
namespace {

spec::JobSpec CaseWithFaults(const catalog::Catalog& cat, const std::string& case_name,
                             const std::string& set) {
  for (const catalog::ValidationCase& c : cat.validation_cases()) {
    if (c.name != case_name) continue;
    return spec::ParseJobSpec(c.job + fmt::format("\n[faults]\nset = \"{}\"\n", set), c.origin,
                              cat);
  }
  ADD_FAILURE() << "no validation case " << case_name;
  return {};
}

struct Source {
  const char* set;
  const char* job;    // the validation case of the run the set was observed on
  int nodes;          // that run's hosts
  double mtti_hours;  // what the source reports
};

constexpr Source kSources[] = {
    {"llama3-405b", "llama3-405b-8k-16384", 2048, 54.0 * 24 / 419},
    {"opt-175b", "opt-175b", 124, 24.0 / 2},
    {"bloom-176b", "bloom-176b", 48, 24.0 * 7},
};

TEST(FaultSets, EachGivesItsSourcesIntervalOnItsSourcesCluster) {
  const catalog::Catalog cat = catalog::Catalog::LoadEmbedded();
  for (const Source& s : kSources) {
    ASSERT_NE(cat.FindFaultSet(s.set), nullptr) << s.set;
    const spec::JobSpec job = CaseWithFaults(cat, s.job, s.set);
    ASSERT_TRUE(job.cluster.has_value()) << s.job;
    EXPECT_EQ(job.cluster->nodes, s.nodes) << s.job;
    const resilience::FaultLoad load = resilience::ResolveFaultLoad(job, cat);
    EXPECT_NEAR(load.mtti / 3600, s.mtti_hours, 0.005 * s.mtti_hours) << s.set;
    EXPECT_NE(load.source.find(s.set), std::string::npos) << load.source;
  }
}

TEST(FaultSets, TheSimulatedRunMeetsTheSourcesCountWithinPoissonNoise) {
  // OPT-175B: over the 16 days between its 10% and 27% notes, 2 hosts a day
  // is 32 failures; the notes count 40+ restarts, most of them hardware.
  const catalog::Catalog cat = catalog::Catalog::LoadEmbedded();
  const spec::JobSpec job = CaseWithFaults(cat, "opt-175b", "opt-175b");
  ScenarioOptions window;
  window.horizon_seconds = 16 * 86400.0;
  const BuiltScenario b = MakeScenario(job, cat, window);
  const TrialSummary t = MonteCarlo(b.scenario, 40, 2021, 2);
  EXPECT_NEAR(t.interruptions.mean, 32, 2 * std::sqrt(32.0));
}

}  // namespace
}  // namespace fmstack::sim
