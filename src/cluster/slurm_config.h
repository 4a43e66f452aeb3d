// cluster: Slurm configuration for a job's cluster. From a ClusterSpec (its
// nodes, spares, racks and instance), the files a Slurm controller needs:
// slurm.conf (nodes, one partition, the scheduler settings fmstack's
// recovery relies on), topology.conf (a tree: node -> leaf switch per rack ->
// spine, so Slurm keeps a job's nodes near each other) and gres.conf where
// the instance has GPUs.
#pragma once

#include <string>
#include <vector>

#include "spec/cluster_spec.h"

namespace fmstack::cluster {

struct SlurmConfigOptions {
  std::string cluster_name = "fmstack";
  std::string controller = "ctl";  // SlurmctldHost
  std::string controller_addr;     // its address, when names do not resolve
  std::string node_prefix = "sn";  // nodes are <prefix>1 .. <prefix>N (spares after the job's)
  std::string node_addr_base;      // "10.77.0.": node i gets base + (10 + i); "" = by name
  std::string partition = "fmstack";
  int64_t cpus = 0;       // per node; 0 = the instance's vCPUs (1 when unknown)
  int64_t memory_mb = 0;  // per node; 0 = the instance's memory
  std::string state_dir = "/var/spool/slurmctld";
  std::string spool_dir = "/var/spool/slurmd";
  std::string log_dir = "/var/log/slurm";
  std::string munge_socket;  // "" = munge's default socket
  std::string health_check;  // HealthCheckProgram (deploy/slurm/fmstack-healthcheck.sh); "" = none
  int64_t health_check_interval = 30;
  std::string accounting_host;  // slurmdbd's address (AccountingStorageHost); "" = no accounting
  // 0 = Slurm's defaults (6817, 6819). Set, so that several clusters share
  // one network namespace (test clusters on one machine).
  int64_t slurmctld_port = 0;
  int64_t accounting_port = 0;  // slurmdbd's DbdPort (AccountingStoragePort)
};

struct SlurmConfig {
  std::string slurm_conf, topology_conf, gres_conf;  // gres_conf "" without GPUs
  std::vector<std::string> nodes;                    // every node name, job nodes then spares
};

// Throws Error naming the option when it cannot make a valid configuration
// (a bad prefix, too many nodes for the address base).
SlurmConfig MakeSlurmConfig(const spec::ClusterSpec& cluster, const SlurmConfigOptions& options);

// "sn[1-4]", "sn[1-2,5]": Slurm's hostlist form of names sharing a prefix.
std::string HostList(const std::string& prefix, const std::vector<int64_t>& indices);

}  // namespace fmstack::cluster
