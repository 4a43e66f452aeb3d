#include "runtime/monitor.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fmstack::runtime {

RankMonitor::RankMonitor(int world, MonitorOptions options, Clock::time_point start)
    : options_(options), start_(start), ranks_(static_cast<size_t>(world)) {
  for (Rank& r : ranks_) r.last = start;
}

void RankMonitor::OnHeartbeat(int rank, int64_t step, const std::string& phase,
                              Clock::time_point now) {
  Rank& r = ranks_.at(static_cast<size_t>(rank));
  r.last = now;
  r.heard = true;
  r.step = std::max(r.step, step);
  r.phase = phase;
  any_heard_ = true;
}

void RankMonitor::OnStep(int rank, int64_t step, double compute_seconds) {
  ranks_.at(static_cast<size_t>(rank)).step = std::max(ranks_[rank].step, step);
  const size_t world = ranks_.size();
  size_t active = 0;
  for (const Rank& r : ranks_) active += r.retired ? 0 : 1;
  if (active < 2) return;  // no peer to compare with
  auto [it, fresh] = compute_.try_emplace(step, world, std::numeric_limits<double>::quiet_NaN());
  it->second[static_cast<size_t>(rank)] = compute_seconds;
  for (size_t r = 0; r < world; ++r) {
    if (!ranks_[r].retired && std::isnan(it->second[r])) return;
  }
  const std::vector<double> all = it->second;
  compute_.erase(compute_.begin(), std::next(it));
  for (size_t r = 0; r < world; ++r) {
    if (ranks_[r].retired) continue;
    std::vector<double> others;
    for (size_t o = 0; o < world; ++o)
      if (o != r && !ranks_[o].retired) others.push_back(all[o]);
    std::nth_element(others.begin(), others.begin() + static_cast<long>(others.size() / 2),
                     others.end());
    const double median = others[others.size() / 2];
    Rank& me = ranks_[r];
    me.slow_streak = all[r] > options_.straggler_factor * median ? me.slow_streak + 1 : 0;
    if (me.slow_streak >= options_.straggler_steps && !straggler_) straggler_ = static_cast<int>(r);
  }
}

std::optional<SilentRank> RankMonitor::Hung(Clock::time_point now) const {
  return SilentLongerThan(now, options_.heartbeat_timeout);
}

std::optional<SilentRank> RankMonitor::SilentLongerThan(Clock::time_point now,
                                                        double seconds) const {
  if (!any_heard_) return std::nullopt;
  std::optional<SilentRank> worst;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const Rank& x = ranks_[r];
    if (x.exited) continue;
    const double silent = std::chrono::duration<double>(now - x.last).count();
    if (silent <= seconds) continue;
    if (!worst || silent > worst->silent_seconds)
      worst = SilentRank{static_cast<int>(r), silent, x.step, x.phase};
  }
  return worst;
}

void RankMonitor::OnCollectiveFailed(int rank, Clock::time_point now) {
  Rank& r = ranks_.at(static_cast<size_t>(rank));
  if (!r.collective_failed) r.collective_failed = now;
}

std::optional<StalledRank> RankMonitor::Stalled(Clock::time_point now, double grace) const {
  std::optional<Clock::time_point> first;
  std::vector<int> waiting, silent;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const Rank& x = ranks_[r];
    if (x.exited) continue;
    if (x.collective_failed) {
      waiting.push_back(static_cast<int>(r));
      first = first ? std::min(*first, *x.collective_failed) : *x.collective_failed;
    } else {
      silent.push_back(static_cast<int>(r));
    }
  }
  if (!first || silent.empty()) return std::nullopt;
  const double waited = std::chrono::duration<double>(now - *first).count();
  if (silent.size() > 1 && waited < grace) return std::nullopt;
  const int blamed = *std::min_element(silent.begin(), silent.end(), [&](int a, int b) {
    return std::pair(ranks_[a].step, a) < std::pair(ranks_[b].step, b);
  });
  const Rank& x = ranks_[static_cast<size_t>(blamed)];
  return StalledRank{blamed, x.step, x.phase, std::move(waiting), waited};
}

int64_t RankMonitor::MaxStep() const {
  int64_t m = 0;
  for (const Rank& r : ranks_) m = std::max(m, r.step);
  return m;
}

}  // namespace fmstack::runtime
