#include "sim/collectives.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

namespace {

// One phase of a hierarchical collective on one level's links.
struct Phase {
  double latency = 0, wire = 0;
};

// `ring` is the whole group's size: the outermost phase of an allreduce,
// reduce-scatter or allgather moves what NCCL's ring over all of the group's
// ranks moves across a node boundary, 2(n-1)/n (or (n-1)/n) of its shard,
// not the 2(N-1)/N a reduction among N node leaders would. NCCL runs no such
// hierarchical reduction outside CollNet and NVLS, and on 2 nodes its ring
// crosses the network with nearly twice the leaders' bytes.
Phase FlatPhase(Collective c, double bytes, const LinkLevel& l, int ring) {
  const double total = FlatTime(c, Algorithm::kRing, bytes, l);
  const double own = l.ranks > 1 && bytes > 0 ? BusFactor(c, l.ranks) * bytes / l.bandwidth : 0;
  const double wire = l.ranks > 1 && bytes > 0 ? BusFactor(c, ring) * bytes / l.bandwidth : 0;
  return {total - own, wire};
}

// The phases in order, innermost first on the way in.
void Phases(Collective c, double bytes, std::span<const LinkLevel> levels, int ring,
            std::vector<Phase>& out) {
  if (levels.empty()) return;
  const LinkLevel& inner = levels.front();
  const std::span<const LinkLevel> outer = levels.subspan(1);
  const double p = inner.ranks;
  if (outer.empty()) {
    out.push_back(FlatPhase(c, bytes, inner, c == Collective::kBroadcast ? inner.ranks : ring));
    return;
  }
  switch (c) {
    case Collective::kAllReduce:
      out.push_back(FlatPhase(Collective::kReduceScatter, bytes, inner, inner.ranks));
      Phases(Collective::kAllReduce, bytes / p, outer, ring, out);
      out.push_back(FlatPhase(Collective::kAllGather, bytes, inner, inner.ranks));
      return;
    case Collective::kReduceScatter:
      // Each inner rank's shard is reduce-scattered across the outer levels.
      out.push_back(FlatPhase(Collective::kReduceScatter, bytes, inner, inner.ranks));
      Phases(Collective::kReduceScatter, bytes / p, outer, ring, out);
      return;
    case Collective::kAllGather:
      Phases(Collective::kAllGather, bytes / p, outer, ring, out);
      out.push_back(FlatPhase(Collective::kAllGather, bytes, inner, inner.ranks));
      return;
    case Collective::kBroadcast:
      Phases(Collective::kBroadcast, bytes, outer, ring, out);
      out.push_back(FlatPhase(Collective::kBroadcast, bytes, inner, inner.ranks));
      return;
    case Collective::kAllToAll: {
      // The part of each rank's buffer bound for peers first reached at a
      // level crosses that level's links.
      double total = 1;
      for (const LinkLevel& l : levels) total *= l.ranks;
      double reached = 1;
      for (const LinkLevel& l : levels) {
        const double before = reached;
        reached *= l.ranks;
        out.push_back(
            {Steps(l.ranks) * l.latency, bytes * (reached - before) / total / l.bandwidth});
      }
      return;
    }
  }
}

}  // namespace

double HierarchicalTime(Collective c, double bytes, std::span<const LinkLevel> levels) {
  std::vector<Phase> phases;
  int ring = 1;
  for (const LinkLevel& l : levels) ring *= l.ranks;
  Phases(c, bytes, levels, ring, phases);
  if (phases.empty()) return 0;
  double latency = 0, wire = 0, slowest = 0;
  for (const Phase& p : phases) {
    latency += p.latency;
    wire += p.wire;
    slowest = std::max(slowest, p.wire);
  }
  // Alltoall's levels are its destinations, not stages of a pipeline: in series.
  if (c == Collective::kAllToAll) return latency + wire;
  const double chunks = std::max(1.0, std::ceil(bytes / kPipelineChunkBytes));
  return latency + slowest + (wire - slowest) / chunks;
}

}  // namespace fmstack::sim
