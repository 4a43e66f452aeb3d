#include "sim/search.h"

#include <algorithm>

#include "util/error.h"

namespace fmstack::sim {

SearchResult SearchLayouts(const spec::JobSpec& job, const Topology& topo,
                           const catalog::Accelerator& accelerator, const StepOptions& options,
                           size_t keep) {
  SearchResult r;
  const workload::TransformerShape& m = job.model;
  const int64_t world = topo.accelerators;
  const int64_t global = job.train.global_batch;
  std::vector<Candidate> fits;
  spec::JobSpec trial = job;
  for (int64_t tp = 1; tp <= std::min<int64_t>(topo.domain, m.heads); tp *= 2) {
    if (m.heads % tp != 0 || m.ffn_hidden % tp != 0) continue;
    for (int64_t cp = 1; cp <= 8; cp *= 2) {
      if (m.seq_len % cp != 0) continue;
      for (int64_t pp = 1; pp <= std::min<int64_t>(m.layers, 128); ++pp) {
        if (world % (tp * cp * pp) != 0) continue;
        const int64_t dp = world / (tp * cp * pp);
        for (int64_t mb = 1; mb <= 16; mb *= 2) {
          if (global > 0 && global % (mb * dp) != 0) continue;
          trial.layout = job.layout;
          trial.layout.tp = tp;
          trial.layout.cp = cp;
          trial.layout.pp = pp;
          trial.layout.dp = dp;
          if (dp % trial.layout.ep != 0) trial.layout.ep = 1;
          trial.train.micro_batch = mb;
          Candidate c{trial.layout, mb, {}};
          try {
            c.step = ModelStep(trial, topo, accelerator, options);
          } catch (const Error&) {
            continue;  // does not tile this topology
          }
          ++r.evaluated;
          if (!c.step.fits) {
            ++r.too_big;
            continue;
          }
          fits.push_back(c);
        }
      }
    }
  }
  std::sort(fits.begin(), fits.end(),
            [](const Candidate& a, const Candidate& b) { return a.step.total < b.step.total; });
  if (fits.size() > keep) fits.resize(keep);
  r.best = std::move(fits);
  return r;
}

}  // namespace fmstack::sim
