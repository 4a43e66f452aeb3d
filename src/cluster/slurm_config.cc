#include "cluster/slurm_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "util/error.h"

namespace fmstack::cluster {

std::string HostList(const std::string& prefix, const std::vector<int64_t>& indices) {
  std::vector<int64_t> v = indices;
  std::sort(v.begin(), v.end());
  std::string ranges;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    ranges += (ranges.empty() ? "" : ",") +
              (i == j ? std::to_string(v[i]) : fmt::format("{}-{}", v[i], v[j]));
    i = j + 1;
  }
  return v.size() == 1 ? prefix + ranges : fmt::format("{}[{}]", prefix, ranges);
}

namespace {

void CheckName(const std::string& what, const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 32 && std::isalpha(name[0]) &&
                  std::all_of(name.begin(), name.end(),
                              [](char c) { return std::isalnum(c) || c == '-' || c == '_'; });
  if (!ok)
    throw Error(
        fmt::format("{} \"{}\": expected a name of letters, digits, '-' and '_' (at most "
                    "32, starting with a letter)",
                    what, name));
}

}  // namespace

SlurmConfig MakeSlurmConfig(const spec::ClusterSpec& c, const SlurmConfigOptions& o) {
  CheckName("--cluster-name", o.cluster_name);
  CheckName("--controller", o.controller);
  CheckName("--node-prefix", o.node_prefix);
  CheckName("--partition", o.partition);
  const int64_t total = c.nodes + c.spares;
  if (total < 1 || total > 100000)
    throw Error(fmt::format("{} nodes: expected 1 to 100000", total));
  if (!o.node_addr_base.empty() && total > 240)
    throw Error(fmt::format("--node-addr-base {}: {} nodes do not fit one /24 (at most 240)",
                            o.node_addr_base, total));
  const int64_t cpus = o.cpus > 0 ? o.cpus : std::max<int64_t>(1, c.instance.vcpus);
  const int64_t memory_mb =
      o.memory_mb > 0
          ? o.memory_mb
          : std::max<int64_t>(1, static_cast<int64_t>(c.instance.memory_bytes / (1 << 20)));
  const bool gpus = c.instance.accelerators > 0 && c.accelerator.vendor == "NVIDIA";

  SlurmConfig out;
  std::vector<int64_t> all;
  for (int64_t i = 1; i <= total; ++i) {
    out.nodes.push_back(o.node_prefix + std::to_string(i));
    all.push_back(i);
  }
  std::string s = fmt::format(
      "# slurm.conf for {} nodes + {} spare(s) of {} (fmstack slurm config)\n"
      "ClusterName={}\n"
      "SlurmctldHost={}{}\n"
      "{}"
      "SlurmUser=root\n"
      "AuthType=auth/munge\n"
      "# Credentials expire fast, so a requeued job is not held back (default 120 s).\n"
      "AuthInfo={}cred_expire=10\n"
      "StateSaveLocation={}\nSlurmdSpoolDir={}/%n\n"
      "SlurmctldLogFile={}/slurmctld.log\nSlurmdLogFile={}/slurmd-%n.log\n"
      "SlurmctldPidFile={}/slurmctld.pid\nSlurmdPidFile={}/slurmd-%n.pid\n"
      "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
      "SchedulerType=sched/backfill\nSchedulerParameters=bf_interval=2\n"
      "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
      "# A node that comes back healthy returns to service by itself; fmstack's\n"
      "# agents drain the ones that are not (scontrol update state=drain).\n"
      "ReturnToService=2\n"
      "SlurmdTimeout=10\nSlurmctldTimeout=10\nMessageTimeout=5\nKillWait=5\nMinJobAge=30\n"
      "# A job whose node fails is requeued (sbatch --requeue) rather than ended.\n"
      "JobRequeue=1\n"
      "{}"
      "TopologyPlugin=topology/tree\n",
      c.nodes, c.spares, c.instance.name.empty() ? "this machine" : c.instance.name, o.cluster_name,
      o.controller, o.controller_addr.empty() ? "" : fmt::format("({})", o.controller_addr),
      o.slurmctld_port > 0 ? fmt::format("SlurmctldPort={}\n", o.slurmctld_port) : "",
      o.munge_socket.empty() ? "" : fmt::format("socket={},", o.munge_socket), o.state_dir,
      o.spool_dir, o.log_dir, o.log_dir, o.state_dir, o.spool_dir,
      o.accounting_host.empty()
          ? "AccountingStorageType=accounting_storage/none\nJobAcctGatherType=jobacct_gather/none\n"
          : fmt::format("# Jobs and their steps in slurmdbd, for sacct.\n"
                        "AccountingStorageType=accounting_storage/slurmdbd\n"
                        "AccountingStorageHost={}\n{}JobAcctGatherType=jobacct_gather/linux\n{}",
                        o.accounting_host,
                        o.accounting_port > 0
                            ? fmt::format("AccountingStoragePort={}\n", o.accounting_port)
                            : "",
                        // For munge, Slurm reads the "password" as the socket to use.
                        o.munge_socket.empty()
                            ? ""
                            : fmt::format("AccountingStoragePass={}\n", o.munge_socket)));
  if (gpus) s += "GresTypes=gpu\n";
  if (!o.health_check.empty())
    s += fmt::format(
        "# fmstack's node checks on every node; a failed one drains the node with its reason.\n"
        "HealthCheckProgram={}\nHealthCheckInterval={}\nHealthCheckNodeState=ANY\n",
        o.health_check, o.health_check_interval);
  for (int64_t i = 1; i <= total; ++i) {
    s += fmt::format(
        "NodeName={}{}{} CPUs={} RealMemory={}{} State=UNKNOWN\n", o.node_prefix, i,
        o.node_addr_base.empty() ? "" : fmt::format(" NodeAddr={}{}", o.node_addr_base, 10 + i),
        cpus, memory_mb, gpus ? fmt::format(" Gres=gpu:{}", c.instance.accelerators) : "");
  }
  s += fmt::format(
      "PartitionName={} Nodes={} Default=YES State=UP MaxTime=INFINITE OverSubscribe=YES\n",
      o.partition, HostList(o.node_prefix, all));
  out.slurm_conf = s;

  // The tree: one leaf switch per rack of nodes_per_rack (all nodes under
  // one leaf when racks are not modelled), the leaves under one spine.
  const int64_t per_rack = c.nodes_per_rack > 0 ? c.nodes_per_rack : total;
  std::string t = "# topology.conf: node -> leaf switch (a rack) -> spine (fmstack slurm config)\n";
  std::vector<int64_t> leaves;
  for (int64_t first = 1, leaf = 0; first <= total; first += per_rack, ++leaf) {
    std::vector<int64_t> rack;
    for (int64_t i = first; i < first + per_rack && i <= total; ++i) rack.push_back(i);
    t += fmt::format("SwitchName=leaf{} Nodes={}\n", leaf, HostList(o.node_prefix, rack));
    leaves.push_back(leaf);
  }
  t += fmt::format("SwitchName=spine Switches={}\n", HostList("leaf", leaves));
  out.topology_conf = t;

  if (gpus) {
    out.gres_conf = fmt::format(
        "# gres.conf (fmstack slurm config)\nNodeName={} Name=gpu File=/dev/nvidia[0-{}]\n",
        HostList(o.node_prefix, all), c.instance.accelerators - 1);
  }
  return out;
}

}  // namespace fmstack::cluster
