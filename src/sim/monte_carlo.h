// sim: many seeds of one scenario, in parallel, summarised as means with
// 95% ranges. Trial k of seed s always draws the same faults, whatever the
// policy, so a comparison of policies on one seed compares them on the very
// same fault traces (common random numbers: the differences are the
// policies', not the dice's).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "sim/cluster_sim.h"

namespace fmstack::sim {

struct Interval {
  double mean = 0;
  double lo = 0, hi = 0;  // 2.5th and 97.5th percentile over the trials
  double half_width = 0;  // 95% confidence half-width of the mean: 1.96 sd / sqrt(n)
};

struct TrialSummary {
  int trials = 0;
  Interval ettr, wall, work, interruptions, planned, cost;
  Badput badput_mean;            // seconds, averaged over trials
  std::vector<double> by_cause;  // mean interruptions per cause
  double finished_share = 0;     // trials that trained all the tokens in the horizon
  double spare_swaps = 0, waits = 0, shrinks = 0;  // means
};

uint64_t TrialSeed(uint64_t seed, int trial);

Interval Summarise(std::vector<double> values);

// Runs `trials` seeds on `threads` threads (0 = all cores). `progress` is
// called from the calling thread with the number of trials done.
TrialSummary MonteCarlo(const Scenario& scenario, int trials, uint64_t seed, int threads = 0,
                        const std::function<void(int done)>& progress = {});

}  // namespace fmstack::sim
