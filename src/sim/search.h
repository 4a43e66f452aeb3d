// sim: search the parallel layouts (TP, PP, CP, DP) and micro-batch sizes
// that tile a cluster, price each with the step model, and rank the ones
// that fit in memory by step time. The step model is closed-form, so a
// thousand layouts take milliseconds.
#pragma once

#include <cstdint>
#include <vector>

#include "catalog/catalog.h"
#include "sim/step_model.h"
#include "sim/topology.h"
#include "spec/job_spec.h"

namespace fmstack::sim {

struct Candidate {
  workload::Layout layout;
  int64_t micro_batch = 1;
  StepTime step;
};

struct SearchResult {
  std::vector<Candidate> best;  // fitting layouts, fastest first
  int64_t evaluated = 0;        // layouts priced
  int64_t too_big = 0;          // priced but over the accelerator's memory
};

// Keeps the job's ZeRO stage, precision, recompute and global batch.
SearchResult SearchLayouts(const spec::JobSpec& job, const Topology& topology,
                           const catalog::Accelerator& accelerator, const StepOptions& options,
                           size_t keep = 10);

}  // namespace fmstack::sim
