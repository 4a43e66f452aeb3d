// The collective cost model against nccl-tests' definitions: on a saturated
// link with no latency, busbw = algbw x BusFactor equals the link bandwidth,
// within 0.5%, for every op and rank count; a hierarchy pays its phases in
// series for one chunk and pipelines many over its different links, with
// the network carrying what NCCL's ring over the whole group sends across it.
#include <gtest/gtest.h>

#include <vector>

#include "sim/collectives.h"

namespace fmstack::sim {
namespace {

const Collective kAll[] = {Collective::kAllReduce, Collective::kAllGather,
                           Collective::kReduceScatter, Collective::kAllToAll,
                           Collective::kBroadcast};

TEST(NcclIdentities, BusFactors) {
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kAllGather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kReduceScatter, 16), 15.0 / 16);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kAllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kBroadcast, 64), 1.0);
}

TEST(NcclIdentities, BusBandwidthOfASaturatedRingIsTheLinkBandwidth) {
  for (Collective c : kAll) {
    for (int n : {2, 3, 4, 8, 16, 72, 1024, 16384}) {
      for (Algorithm a : {Algorithm::kRing, Algorithm::kTree}) {
        const LinkLevel link{"nvlink", n, 450e9, 0};
        const double bytes = 1ull << 30;
        const double algbw = bytes / FlatTime(c, a, bytes, link);
        EXPECT_NEAR(algbw * BusFactor(c, n) / link.bandwidth, 1.0, 0.005)
            << CollectiveName(c) << " n=" << n;
      }
    }
  }
}

TEST(NcclIdentities, LatencyDominatesSmallMessagesAndTreeWinsThere) {
  const LinkLevel link{"efa", 1024, 50e9, 20e-6};
  const double small = 8 << 10;
  EXPECT_LT(FlatTime(Collective::kAllReduce, Algorithm::kTree, small, link),
            FlatTime(Collective::kAllReduce, Algorithm::kRing, small, link) / 10);
  // Large messages: the same wire time, ring pays 2(n-1) latencies.
  const double large = 1ull << 32;
  const double ring = FlatTime(Collective::kAllReduce, Algorithm::kRing, large, link);
  EXPECT_NEAR(ring, 2 * 1023 * 20e-6 + 2.0 * 1023 / 1024 * large / 50e9, 1e-9);
}

// One chunk goes through the phases in series. Inside a node each phase
// moves its own share; across nodes NCCL's ring carries the whole group's
// share of the shard, 2(n-1)/n of it for an allreduce, over each NIC.
TEST(NcclIdentities, OneChunkPaysThePhasesInSeriesAndTheNetworkTheRingsBytes) {
  const std::vector<LinkLevel> levels = {{"node", 8, 100e9, 0}, {"net", 16, 50e9, 0}};
  const double bytes = kPipelineChunkBytes;
  const double shard = bytes / 8;
  EXPECT_NEAR(HierarchicalTime(Collective::kAllReduce, bytes, levels),
              2 * (7.0 / 8) * bytes / 100e9 + 2 * (127.0 / 128) * shard / 50e9, 1e-15);
  EXPECT_NEAR(HierarchicalTime(Collective::kAllGather, bytes, levels),
              (7.0 / 8) * bytes / 100e9 + (127.0 / 128) * shard / 50e9, 1e-15);
  EXPECT_NEAR(HierarchicalTime(Collective::kReduceScatter, bytes, levels),
              (7.0 / 8) * bytes / 100e9 + (127.0 / 128) * shard / 50e9, 1e-15);
  // All-to-all sends each level's share over that level, as a flat ring
  // over equal links would.
  const std::vector<LinkLevel> uniform = {{"node", 8, 100e9, 0}, {"net", 16, 100e9, 0}};
  const LinkLevel flat{"flat", 128, 100e9, 0};
  EXPECT_NEAR(HierarchicalTime(Collective::kAllToAll, bytes, uniform) /
                  FlatTime(Collective::kAllToAll, Algorithm::kRing, bytes, flat),
              1.0, 1e-9);
}

// Chunks pipeline through the phases, which use different links: a large
// message pays the slowest phase whole and the others for one chunk each.
TEST(NcclIdentities, SlowerOuterLinksOnlySlowTheShardThatCrossesThem) {
  // 8 GPUs on NVLink (450 GB/s each) x 64 nodes on 50 GB/s per GPU of EFA.
  const std::vector<LinkLevel> levels = {{"nvlink", 8, 450e9, 0}, {"efa", 64, 50e9, 0}};
  const double bytes = 1ull << 30;
  const double chunks = bytes / kPipelineChunkBytes;  // 256
  const double t = HierarchicalTime(Collective::kAllReduce, bytes, levels);
  const double inner = 2 * (7.0 / 8) * bytes / 450e9;           // reduce-scatter + all-gather
  const double outer = 2 * (511.0 / 512) * (bytes / 8) / 50e9;  // the ring's bytes per NIC
  ASSERT_GT(outer, inner / 2);
  EXPECT_NEAR(t, outer + inner / chunks, 1e-12);
  // A uniform hierarchy of many chunks beats the flat ring by the phases it overlaps.
  const std::vector<LinkLevel> uniform = {{"node", 8, 100e9, 0}, {"net", 16, 100e9, 0}};
  const LinkLevel flat{"flat", 128, 100e9, 0};
  EXPECT_LT(HierarchicalTime(Collective::kAllReduce, bytes, uniform),
            0.75 * FlatTime(Collective::kAllReduce, Algorithm::kRing, bytes, flat));
}

}  // namespace
}  // namespace fmstack::sim
