#include "sim/validation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "sim/busbw.h"
#include "sim/collectives.h"
#include "sim/step_model.h"
#include "sim/topology.h"
#include "spec/job_spec.h"
#include "util/error.h"

namespace fmstack::sim {
namespace {

// nccl-tests' busbw of the case's op over every accelerator of its cluster.
double ModelBusbw(const catalog::ValidationCase& c, const catalog::Catalog& catalog) {
  const std::optional<Collective> op = ParseCollective(c.collective);
  if (!op) {
    throw Error(
        fmt::format("{}: collective = \"{}\" is not one the model times (allreduce, "
                    "allgather, reduce_scatter, alltoall, broadcast)",
                    c.origin, c.collective));
  }
  const spec::ClusterSpec cluster = spec::ParseClusterSpec(c.job, c.origin, catalog);
  const Topology topology = BuildTopology(cluster);
  const std::vector<LinkLevel> levels = topology.LevelsFor(topology.accelerators, 1);
  const double seconds = HierarchicalTime(*op, c.bytes, levels);
  return c.bytes / seconds * BusFactor(*op, static_cast<int>(topology.accelerators)) / 1e9;
}

// A training case's job, parsed once and timed under any options.
struct TrainingCase {
  const catalog::ValidationCase* c;
  spec::JobSpec job;
  Topology topology;

  TrainingCase(const catalog::ValidationCase& vc, const catalog::Catalog& catalog)
      : c(&vc), job(spec::ParseJobSpec(vc.job, vc.origin, catalog)) {
    if (!job.cluster) throw Error(vc.origin + ": the case's job has no [cluster]");
    topology = BuildTopology(*job.cluster);
    if (vc.metric == "gpu_hours" && (job.train.tokens <= 0 || job.train.global_batch <= 0)) {
      throw Error(vc.origin +
                  ": a gpu_hours case's job sets train.tokens and train.global_batch (the "
                  "run's tokens and its batch in sequences)");
    }
  }

  double TokensPerStep() const {
    return static_cast<double>(job.train.global_batch) * static_cast<double>(job.model.seq_len);
  }

  double Figure(StepOptions options) const {
    options.sequence_parallel = c->sequence_parallel;
    const StepTime t = ModelStep(job, topology, job.cluster->accelerator, options);
    if (!t.fits) {
      throw Error(fmt::format("{}: the case's layout does not fit ({:.1f} GB per accelerator)",
                              c->origin, t.memory_per_accelerator / 1e9));
    }
    if (c->metric == "step_seconds") return t.total;
    if (c->metric == "mfu_percent") return 100 * t.mfu;
    if (c->metric == "gpu_hours") {
      const double steps = job.train.tokens / TokensPerStep();
      return steps * t.total * static_cast<double>(topology.accelerators) / 3600;
    }
    if (c->flops == "gpt-neox-2021") return NeoxTflops(t);
    return t.tflops_per_accelerator;
  }

  // TFLOP/s per accelerator as GPT-NeoX logged it before its PR #1044:
  // 6 x every parameter (both embeddings included) + 60 x seq x hidden x
  // layers per token, whatever was recomputed.
  double NeoxTflops(const StepTime& t) const {
    const workload::TransformerShape& m = job.model;
    const double per_token = 6.0 * static_cast<double>(workload::CountParams(m).total) +
                             60.0 * static_cast<double>(m.seq_len) * static_cast<double>(m.hidden) *
                                 static_cast<double>(m.layers);
    return TokensPerStep() * per_token / t.total / static_cast<double>(topology.accelerators) /
           1e12;
  }
};

// `fn()`, with the case named in any error.
template <typename Fn>
auto NamingTheCase(const catalog::ValidationCase& c, Fn&& fn) {
  try {
    return fn();
  } catch (const Error& e) {  // SpecError too: it is an Error
    throw Error(fmt::format("validation case '{}': {}", c.name, e.what()));
  }
}

double CaseFigure(const catalog::ValidationCase& c, const catalog::Catalog& catalog,
                  const StepOptions& options) {
  return NamingTheCase(c, [&] {
    return c.IsCollective() ? ModelBusbw(c, catalog) : TrainingCase(c, catalog).Figure(options);
  });
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

Calibration CalibrateEfficiency(const catalog::Catalog& catalog) {
  std::vector<TrainingCase> cases;
  for (const catalog::ValidationCase& c : catalog.validation_cases()) {
    if (c.calibration && !c.IsCollective())
      cases.push_back(NamingTheCase(c, [&] { return TrainingCase(c, catalog); }));
  }
  Calibration best;
  best.cases = static_cast<int>(cases.size());
  if (cases.empty()) return best;  // a catalog of checks only: nothing to fit
  best.worst_abs_error = std::numeric_limits<double>::infinity();
  // The worst error is convex enough in the efficiency (each case's figure
  // moves one way with it) that a plain scan finds its minimum; 0.001 steps
  // are finer than anything the figures could tell apart.
  for (int milli = 300; milli <= 950; ++milli) {
    StepOptions options;
    options.compute_efficiency = milli / 1000.0;
    double worst = 0;
    for (const TrainingCase& t : cases) {
      const double model = NamingTheCase(*t.c, [&] { return t.Figure(options); });
      worst = std::max(worst, std::fabs(model - t.c->published) / t.c->published);
    }
    if (worst < best.worst_abs_error) {
      best.worst_abs_error = worst;
      best.efficiency = options.compute_efficiency;
    }
  }
  return best;
}

Validation Validate(const catalog::Catalog& catalog, const StepOptions& options) {
  Validation v;
  for (const catalog::ValidationCase& c : catalog.validation_cases()) {
    ValidationResult r;
    r.c = &c;
    r.model = CaseFigure(c, catalog, options);
    r.error = (r.model - c.published) / c.published;
    v.results.push_back(r);
  }
  std::vector<double> abs, independent, collectives;
  for (const ValidationResult& r : v.results) {
    abs.push_back(std::fabs(r.error));
    if (r.c->IsCollective()) {
      collectives.push_back(std::fabs(r.error));
    } else if (!r.c->calibration) {
      independent.push_back(std::fabs(r.error));
    }
    if (std::fabs(r.error) > v.worst_abs_error) {
      v.worst_abs_error = std::fabs(r.error);
      v.worst_case = r.c->name;
    }
  }
  v.median_abs_error = Median(abs);
  v.independent = static_cast<int>(independent.size());
  v.independent_median_abs_error = Median(independent);
  v.collectives = static_cast<int>(collectives.size());
  v.collective_median_abs_error = Median(collectives);
  // Within a group, sorting by the published figure must sort the model's too.
  std::map<std::string, std::vector<const ValidationResult*>> groups;
  for (const ValidationResult& r : v.results) {
    for (const std::string& g : r.c->groups) groups[g].push_back(&r);
  }
  for (auto& [name, members] : groups) {
    if (members.size() < 2) continue;
    std::sort(members.begin(), members.end(),
              [](const ValidationResult* a, const ValidationResult* b) {
                return a->c->published < b->c->published;
              });
    GroupOrder g{name, static_cast<int>(members.size()), true};
    for (size_t i = 1; i < members.size(); ++i) {
      if (members[i]->c->published > members[i - 1]->c->published &&
          members[i]->model < members[i - 1]->model) {
        g.kept = false;
      }
    }
    v.groups.push_back(g);
  }
  return v;
}

}  // namespace fmstack::sim
