#include "sim/topology.h"

#include <gtest/gtest.h>

#include "catalog/catalog.h"
#include "spec/cluster_spec.h"

namespace fmstack::sim {
namespace {

spec::ClusterSpec Cluster(const std::string& body) {
  static const catalog::Catalog catalog = catalog::Catalog::LoadEmbedded();
  return spec::ParseClusterSpec("[cluster]\n" + body, "c.toml", catalog);
}

TEST(Topology, P5NodesSplitIntoNvlinkAndEfa) {
  const Topology t = BuildTopology(Cluster("instance = \"p5.48xlarge\"\nnodes = 64\n"));
  EXPECT_EQ(t.accelerators, 512);
  EXPECT_EQ(t.domain, 8);
  // 900 GB/s both directions; 3200 Gbps per node, per GPU; each at what NCCL
  // moves over such a link.
  const NetworkOptions o;
  EXPECT_DOUBLE_EQ(t.scaleup.bandwidth, 450e9 * o.scaleup_efficiency);
  EXPECT_DOUBLE_EQ(t.network.bandwidth, 3200e9 / 8 / 8 * o.network_efficiency);
  // TP = 8 (stride 1) stays on NVLink; DP over 64 nodes (stride 8) is all EFA;
  // a flat group of 512 crosses both.
  const auto tp = t.LevelsFor(8, 1);
  ASSERT_EQ(tp.size(), 1u);
  EXPECT_EQ(tp[0].name, "scale-up");
  const auto dp = t.LevelsFor(64, 8);
  ASSERT_EQ(dp.size(), 1u);
  EXPECT_EQ(dp[0].name, "efa");
  EXPECT_EQ(dp[0].ranks, 64);
  const auto all = t.LevelsFor(512, 1);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].ranks * all[1].ranks, 512);
}

TEST(Topology, TcpAndOversubscribedSpineAreSlower) {
  const spec::ClusterSpec c =
      Cluster("instance = \"p4d.24xlarge\"\nnodes = 64\nnodes_per_rack = 16\n");
  const Topology efa = BuildTopology(c);
  const Topology tcp = BuildTopology(c, {.tcp_only = true});
  const Topology over = BuildTopology(c, {.spine_oversubscription = 4});
  const double bytes = 1ull << 30;
  const double t_efa = HierarchicalTime(Collective::kAllReduce, bytes, efa.LevelsFor(512, 1));
  EXPECT_GT(HierarchicalTime(Collective::kAllReduce, bytes, tcp.LevelsFor(512, 1)), 2 * t_efa);
  EXPECT_GT(HierarchicalTime(Collective::kAllReduce, bytes, over.LevelsFor(512, 1)), 2 * t_efa);
  // Within one rack the spine does not matter.
  EXPECT_DOUBLE_EQ(HierarchicalTime(Collective::kAllReduce, bytes, over.LevelsFor(128, 1)),
                   HierarchicalTime(Collective::kAllReduce, bytes, efa.LevelsFor(128, 1)));
  EXPECT_THROW(efa.LevelsFor(1024, 1), Error);
}

}  // namespace
}  // namespace fmstack::sim
