// sim: faults as a stream of (time, node, cause) in time order. Each cause
// is a per-node Poisson process, so the whole cluster is one Poisson process
// with the summed rate whose events pick a cause by rate and a node
// uniformly. A fault that lands on a node already out of service is thinned
// by the caller, which keeps the stream independent of what the job does:
// every policy compared on a seed sees the very same faults.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "catalog/catalog.h"
#include "resilience/job_model.h"
#include "util/random.h"

namespace fmstack::sim {

inline constexpr int kPlannedCause = -1;  // planned maintenance
inline constexpr double kPlannedOutOfService = resilience::kPlannedOutOfService;

struct FaultEvent {
  double time = 0;
  int64_t node = 0;
  int cause = 0;              // index into the causes, or kPlannedCause
  double out_of_service = 0;  // drawn: exponential around the cause's mean
};

class FaultStream {
 public:
  FaultStream(std::span<const catalog::FaultCause> causes, double planned_per_node_hour,
              int64_t nodes, uint64_t seed);

  // The next fault; time is +inf when nothing can fail.
  FaultEvent Next();
  double cluster_rate_per_second() const { return total_rate_; }

 private:
  std::span<const catalog::FaultCause> causes_;
  std::vector<double> cumulative_;  // per-node rates, planned last
  double total_rate_ = 0;           // whole cluster, per second
  int64_t nodes_;
  double now_ = 0;
  Rng rng_;
};

// Uniform in (0, 1] with 53 bits: safe under log().
inline double OpenUnit(Rng& rng) {
  return (static_cast<double>(rng.Next() >> 11) + 1.0) * 0x1.0p-53;
}

}  // namespace fmstack::sim
