#include "sim/faults.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fmstack::sim {

FaultStream::FaultStream(std::span<const catalog::FaultCause> causes, double planned_per_node_hour,
                         int64_t nodes, uint64_t seed)
    : causes_(causes), nodes_(nodes), rng_(seed) {
  double sum = 0;
  for (const catalog::FaultCause& c : causes) cumulative_.push_back(sum += c.rate_per_node_hour);
  cumulative_.push_back(sum += planned_per_node_hour);
  total_rate_ = sum * static_cast<double>(nodes) / 3600.0;
}

FaultEvent FaultStream::Next() {
  FaultEvent e;
  if (total_rate_ <= 0 || nodes_ <= 0) {
    e.time = std::numeric_limits<double>::infinity();
    return e;
  }
  now_ += -std::log(OpenUnit(rng_)) / total_rate_;
  e.time = now_;
  e.node = static_cast<int64_t>(rng_.Next() % static_cast<uint64_t>(nodes_));
  const double pick = (1.0 - OpenUnit(rng_)) * cumulative_.back();
  const size_t i = static_cast<size_t>(
      std::upper_bound(cumulative_.begin(), cumulative_.end(), pick) - cumulative_.begin());
  const double draw = -std::log(OpenUnit(rng_));
  if (i >= causes_.size()) {
    e.cause = kPlannedCause;
    e.out_of_service = kPlannedOutOfService;
  } else {
    e.cause = static_cast<int>(i);
    e.out_of_service = causes_[i].out_of_service_seconds * draw;
  }
  return e;
}

}  // namespace fmstack::sim
