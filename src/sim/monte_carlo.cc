#include "sim/monte_carlo.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>

#include "util/random.h"

namespace fmstack::sim {

uint64_t TrialSeed(uint64_t seed, int trial) {
  return HashWords({seed, static_cast<uint64_t>(trial), 0x51a7u});
}

Interval Summarise(std::vector<double> v) {
  Interval out;
  if (v.empty()) return out;
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  double sum = 0;
  for (double x : v) sum += x;
  out.mean = sum / n;
  double var = 0;
  for (double x : v) var += (x - out.mean) * (x - out.mean);
  const double sd = v.size() > 1 ? std::sqrt(var / (n - 1)) : 0;
  out.half_width = 1.96 * sd / std::sqrt(n);
  // Nearest-rank percentiles.
  auto rank = [&](double p) {
    const size_t i = static_cast<size_t>(std::clamp(std::ceil(p * n) - 1, 0.0, n - 1));
    return v[i];
  };
  out.lo = rank(0.025);
  out.hi = rank(0.975);
  return out;
}

TrialSummary MonteCarlo(const Scenario& scenario, int trials, uint64_t seed, int threads,
                        const std::function<void(int)>& progress) {
  std::vector<RunResult> runs(static_cast<size_t>(std::max(0, trials)));
  std::atomic<int> next{0}, done{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  Scenario quiet = scenario;
  quiet.record_timeline = false;
  auto worker = [&] {
    for (int k = next++; k < trials; k = next++) {
      try {
        runs[static_cast<size_t>(k)] = Simulate(quiet, TrialSeed(seed, k));
      } catch (...) {
        std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
      ++done;
    }
  };
  const int n = std::max(
      1, std::min(trials,
                  threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency())));
  std::vector<std::jthread> pool;
  for (int i = 0; i < n; ++i) pool.emplace_back(worker);
  while (progress && done.load() < trials) {
    progress(done.load());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pool.clear();  // joins
  if (failure) std::rethrow_exception(failure);
  if (progress) progress(trials);

  TrialSummary s;
  s.trials = trials;
  std::vector<double> ettr, wall, work, interruptions, planned, cost;
  s.by_cause.assign(scenario.causes.size(), 0);
  for (const RunResult& r : runs) {
    ettr.push_back(r.ettr());
    wall.push_back(r.wall);
    work.push_back(r.work);
    interruptions.push_back(static_cast<double>(r.interruptions));
    planned.push_back(static_cast<double>(r.planned));
    cost.push_back(r.cost);
    const Badput& b = r.badput;
    Badput& m = s.badput_mean;
    m.lost_work += b.lost_work;
    m.detection += b.detection;
    m.restart += b.restart;
    m.checkpoint += b.checkpoint;
    m.waiting += b.waiting;
    m.degraded += b.degraded;
    m.maintenance += b.maintenance;
    for (size_t c = 0; c < r.by_cause.size(); ++c) {
      s.by_cause[c] += static_cast<double>(r.by_cause[c]);
    }
    s.finished_share += r.finished ? 1 : 0;
    s.spare_swaps += static_cast<double>(r.spare_swaps);
    s.waits += static_cast<double>(r.waits);
    s.shrinks += static_cast<double>(r.shrinks);
  }
  const double k = std::max(1.0, static_cast<double>(trials));
  Badput& m = s.badput_mean;
  for (double* x : {&m.lost_work, &m.detection, &m.restart, &m.checkpoint, &m.waiting, &m.degraded,
                    &m.maintenance, &s.finished_share, &s.spare_swaps, &s.waits, &s.shrinks}) {
    *x /= k;
  }
  for (double& c : s.by_cause) c /= k;
  s.ettr = Summarise(std::move(ettr));
  s.wall = Summarise(std::move(wall));
  s.work = Summarise(std::move(work));
  s.interruptions = Summarise(std::move(interruptions));
  s.planned = Summarise(std::move(planned));
  s.cost = Summarise(std::move(cost));
  return s;
}

}  // namespace fmstack::sim
