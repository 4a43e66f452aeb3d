// bench/sim: how fast `fmstack sim` is against the targets of its issue -
// one 54-day run of a 16,384-GPU job with faults (< 1 s), 100 Monte Carlo
// trials of it (< 30 s), a 1,000,000-accelerator cluster for 30 days (< 10 s,
// < 4 GB), and the step model over 1,000 layouts (< 1 s). Each row prints
// wall time, peak resident memory and target / measured (> 1 = faster).
#include <fmt/format.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "catalog/catalog.h"
#include "sim/monte_carlo.h"
#include "sim/scenario.h"
#include "sim/search.h"
#include "spec/job_spec.h"

namespace {

using namespace fmstack;

sim::ScenarioOptions Window(double days) {
  sim::ScenarioOptions o;
  o.horizon_seconds = days * 86400;
  return o;
}

double PeakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024;
}

double Seconds(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Row(const std::string& name, double seconds, double target, const std::string& detail) {
  std::printf("| %-44s | %9.3f s | < %4.0f s | %8.1fx | %7.0f MB | %s |\n", name.c_str(), seconds,
              target, target / seconds, PeakRssBytes() / 1e6, detail.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string root = argc > 1 ? argv[1] : ".";
  const catalog::Catalog cat = catalog::Catalog::LoadEmbedded();
  const spec::JobSpec llama = spec::LoadJobSpec(root + "/examples/llama3-405b-54d.toml", cat);
  const sim::BuiltScenario b = sim::MakeScenario(llama, cat, Window(54));

  std::printf("| case | wall | target | target / wall | peak RSS | result |\n");
  std::printf("|---|---|---|---|---|---|\n");
  sim::RunResult one;
  const double t1 = Seconds([&] { one = sim::Simulate(b.scenario, 1); });
  Row("16,384 H100 x 54 days, one run", t1, 1,
      fmt::format("{} interruptions, ETTR {:.1f}%", one.interruptions, 100 * one.ettr()));

  sim::TrialSummary mc;
  const double t2 = Seconds([&] { mc = sim::MonteCarlo(b.scenario, 100, 1); });
  Row("16,384 H100 x 54 days, 100 Monte Carlo trials", t2, 30,
      fmt::format("ETTR {:.1f}% [{:.1f}, {:.1f}]", 100 * mc.ettr.mean, 100 * mc.ettr.lo,
                  100 * mc.ettr.hi));

  // A million accelerators: 125,000 nodes of 8, TP 8 x PP 8 x DP 15,625.
  spec::JobSpec big = llama;
  big.cluster->nodes = 125000;
  big.cluster->spares = 2000;
  big.layout.pp = 8;
  big.layout.virtual_stages = 1;
  big.layout.dp = 0;
  big.train.global_batch = 15625 * 4;
  spec::ResolveLayout(big, *big.cluster);
  for (resilience::Strategy policy :
       {resilience::Strategy::kCheckpointRestart, resilience::Strategy::kCheckpointless,
        resilience::Strategy::kElastic}) {
    sim::RunResult huge;
    const double t3 = Seconds([&] {
      sim::BuiltScenario hb = sim::MakeScenario(big, cat, Window(30));
      hb.scenario.policy.strategy = policy;
      huge = sim::Simulate(hb.scenario, 1);
    });
    Row(fmt::format("1,000,000 H100 x 30 days, {}", resilience::StrategyName(policy)), t3, 10,
        fmt::format("{} interruptions, ETTR {:.1f}%", huge.interruptions, 100 * huge.ettr()));
  }

  const sim::Topology topo = sim::BuildTopology(*llama.cluster);
  int64_t evaluated = 0;
  int rounds = 0;
  const double t4 = Seconds([&] {
    while (evaluated < 1000) {
      evaluated += sim::SearchLayouts(llama, topo, llama.cluster->accelerator, {}, 10).evaluated;
      ++rounds;
    }
  });
  Row(fmt::format("step model, {} layouts (--search x {})", evaluated, rounds), t4, 1,
      fmt::format("{:.1f} us per layout", 1e6 * t4 / static_cast<double>(evaluated)));
  return 0;
}
