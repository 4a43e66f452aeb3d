#include "cluster/slurm_config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "catalog/catalog.h"
#include "util/error.h"

namespace fmstack::cluster {
namespace {

spec::ClusterSpec P5(int64_t nodes, int64_t spares, int64_t per_rack) {
  const catalog::Catalog catalog = catalog::Catalog::LoadEmbedded();
  return spec::ParseClusterSpec(
      fmt::format("[cluster]\ninstance = \"p5.48xlarge\"\nnodes = {}\nspares = {}\n{}", nodes,
                  spares, per_rack > 0 ? fmt::format("nodes_per_rack = {}\n", per_rack) : ""),
      "p5.toml", catalog);
}

TEST(HostList, CompressesRuns) {
  EXPECT_EQ(HostList("sn", {1}), "sn1");
  EXPECT_EQ(HostList("sn", {3, 1, 2}), "sn[1-3]");
  EXPECT_EQ(HostList("sn", {1, 2, 5, 7, 8}), "sn[1-2,5,7-8]");
}

TEST(SlurmConfig, GpuNodesRacksAndSpares) {
  const SlurmConfig c = MakeSlurmConfig(P5(64, 2, 16), {});
  ASSERT_EQ(c.nodes.size(), 66u);
  EXPECT_EQ(c.nodes.back(), "sn66");
  // The catalog's instance: 192 vCPUs, 2 TiB, 8 GPUs.
  EXPECT_NE(c.slurm_conf.find("NodeName=sn1 CPUs=192 RealMemory=2097152 Gres=gpu:8"),
            std::string::npos)
      << c.slurm_conf;
  EXPECT_NE(c.slurm_conf.find("GresTypes=gpu"), std::string::npos);
  EXPECT_NE(c.slurm_conf.find("PartitionName=fmstack Nodes=sn[1-66]"), std::string::npos);
  EXPECT_NE(c.slurm_conf.find("TopologyPlugin=topology/tree"), std::string::npos);
  // Five racks of 16 (the last one holds the two spares), one spine.
  EXPECT_NE(c.topology_conf.find("SwitchName=leaf0 Nodes=sn[1-16]"), std::string::npos);
  EXPECT_NE(c.topology_conf.find("SwitchName=leaf4 Nodes=sn[65-66]"), std::string::npos);
  EXPECT_NE(c.topology_conf.find("SwitchName=spine Switches=leaf[0-4]"), std::string::npos);
  EXPECT_EQ(
      c.gres_conf.find("NodeName=sn[1-66] Name=gpu File=/dev/nvidia[0-7]") == std::string::npos,
      false)
      << c.gres_conf;
}

TEST(SlurmConfig, TestClusterAddressesAndBadOptions) {
  SlurmConfigOptions o;
  o.node_addr_base = "10.77.0.";
  o.controller_addr = "10.77.0.1";
  o.health_check = "/usr/local/sbin/fmstack-healthcheck.sh";
  const SlurmConfig c = MakeSlurmConfig(P5(2, 1, 0), o);
  EXPECT_NE(c.slurm_conf.find("SlurmctldHost=ctl(10.77.0.1)"), std::string::npos);
  EXPECT_NE(c.slurm_conf.find("NodeName=sn3 NodeAddr=10.77.0.13"), std::string::npos);
  EXPECT_NE(c.slurm_conf.find("HealthCheckProgram=/usr/local/sbin/fmstack-healthcheck.sh"),
            std::string::npos);
  EXPECT_NE(c.topology_conf.find("SwitchName=leaf0 Nodes=sn[1-3]"), std::string::npos);
  o.node_prefix = "9x";
  EXPECT_THROW(MakeSlurmConfig(P5(2, 1, 0), o), Error);
  o.node_prefix = "sn";
  EXPECT_THROW(MakeSlurmConfig(P5(300, 0, 0), o), Error);  // 300 nodes do not fit a /24
}

TEST(SlurmConfig, PortsAreSlurmsDefaultsUnlessSet) {
  SlurmConfigOptions o;
  o.accounting_host = "10.77.3.1";
  const SlurmConfig plain = MakeSlurmConfig(P5(2, 0, 0), o);
  EXPECT_EQ(plain.slurm_conf.find("SlurmctldPort="), std::string::npos);
  EXPECT_EQ(plain.slurm_conf.find("AccountingStoragePort="), std::string::npos);
  o.slurmctld_port = 17006;
  o.accounting_port = 17007;
  const SlurmConfig c = MakeSlurmConfig(P5(2, 0, 0), o);
  EXPECT_NE(c.slurm_conf.find("SlurmctldHost=ctl\nSlurmctldPort=17006\n"), std::string::npos)
      << c.slurm_conf;
  EXPECT_NE(c.slurm_conf.find("AccountingStorageHost=10.77.3.1\nAccountingStoragePort=17007\n"),
            std::string::npos)
      << c.slurm_conf;
}

}  // namespace
}  // namespace fmstack::cluster
