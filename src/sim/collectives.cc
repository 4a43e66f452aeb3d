#include "sim/collectives.h"

#include <cmath>

namespace fmstack::sim {
namespace {

double Steps(int n) {
  return static_cast<double>(n - 1);
}
double Share(int n) {
  return static_cast<double>(n - 1) / n;
}
double Log2Ceil(int n) {
  return std::ceil(std::log2(static_cast<double>(n)));
}

}  // namespace

const char* CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "allreduce";
    case Collective::kAllGather:
      return "allgather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAllToAll:
      return "alltoall";
    case Collective::kBroadcast:
      return "broadcast";
  }
  return "?";
}

double BusFactor(Collective c, int n) {
  switch (c) {
    case Collective::kAllReduce:
      return 2 * Share(n);
    case Collective::kBroadcast:
      return 1;
    default:
      return Share(n);
  }
}

double FlatTime(Collective c, Algorithm a, double bytes, const LinkLevel& l) {
  const int n = l.ranks;
  if (n <= 1 || bytes <= 0) return 0;
  // Every rank moves BusFactor x bytes through its link, whichever algorithm
  // (the double binary tree reaches ring bandwidth); they differ in the
  // number of latency-bound steps.
  const double wire = BusFactor(c, n) * bytes / l.bandwidth;
  double steps = 0;
  switch (c) {
    case Collective::kAllReduce:
      steps = a == Algorithm::kRing ? 2 * Steps(n) : 2 * Log2Ceil(n);
      break;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      steps = a == Algorithm::kRing ? Steps(n) : Log2Ceil(n);
      break;
    case Collective::kBroadcast:
      steps = a == Algorithm::kRing ? Steps(n) : Log2Ceil(n);
      break;
  }
  return steps * l.latency + wire;
}

double HierarchicalTime(Collective c, double bytes, std::span<const LinkLevel> levels) {
  if (levels.empty()) return 0;
  const LinkLevel& inner = levels.front();
  const std::span<const LinkLevel> outer = levels.subspan(1);
  const double p = inner.ranks;
  if (outer.empty()) return FlatTime(c, Algorithm::kRing, bytes, inner);
  switch (c) {
    case Collective::kAllReduce:
      return FlatTime(Collective::kReduceScatter, Algorithm::kRing, bytes, inner) +
             HierarchicalTime(Collective::kAllReduce, bytes / p, outer) +
             FlatTime(Collective::kAllGather, Algorithm::kRing, bytes, inner);
    case Collective::kReduceScatter:
      // Each inner rank's shard is reduce-scattered across the outer levels.
      return FlatTime(Collective::kReduceScatter, Algorithm::kRing, bytes, inner) +
             HierarchicalTime(Collective::kReduceScatter, bytes / p, outer);
    case Collective::kAllGather:
      return HierarchicalTime(Collective::kAllGather, bytes / p, outer) +
             FlatTime(Collective::kAllGather, Algorithm::kRing, bytes, inner);
    case Collective::kAllToAll: {
      // The part of each rank's buffer bound for peers first reached at a
      // level crosses that level's links.
      double total = 1;
      for (const LinkLevel& l : levels) total *= l.ranks;
      double reached = 1, t = 0;
      for (const LinkLevel& l : levels) {
        const double before = reached;
        reached *= l.ranks;
        t += Steps(l.ranks) * l.latency + bytes * (reached - before) / total / l.bandwidth;
      }
      return t;
    }
    case Collective::kBroadcast:
      return HierarchicalTime(Collective::kBroadcast, bytes, outer) +
             FlatTime(Collective::kBroadcast, Algorithm::kRing, bytes, inner);
  }
  return 0;
}

}  // namespace fmstack::sim
