// `fmstack slurm config JOB.toml [--out DIR]`: the Slurm configuration of the
// job's cluster (slurm.conf, topology.conf, gres.conf), for a real cluster
// or, with --node-addr-base and --controller-addr, for the test cluster that
// scripts/slurm-up.sh starts in network namespaces.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "cluster/slurm_config.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace fmstack::cli {
namespace {

struct SlurmArgs {
  std::string job, cluster, out = "slurm", catalog_dir;
  cluster::SlurmConfigOptions options;
};

void Write(const std::string& path, const std::string& text) {
  AtomicFileWriter w(path);
  w.Write(text.data(), text.size());
  w.Commit();
}

int Config(const SlurmArgs& a) {
  const catalog::Catalog catalog = LoadCatalog(a.catalog_dir);
  const spec::JobSpec job = LoadJob(a.job, a.cluster, catalog);
  if (!job.cluster)
    throw Error(fmt::format("{}: the job has no [cluster] (or pass --cluster FILE)", a.job));
  cluster::SlurmConfigOptions o = a.options;
  if (o.cluster_name == "fmstack") o.cluster_name = job.name.substr(0, 32);
  // Slurm's cluster names are lower case letters, digits and '_'.
  for (char& c : o.cluster_name)
    c = c == '-' || c == '.' ? '_' : static_cast<char>(std::tolower(c));
  if (job.cluster->instance.name == spec::kLocalInstance) {
    // Nodes of the local backend are this machine: its cores and memory.
    if (o.cpus == 0) o.cpus = std::max<long>(1, ::sysconf(_SC_NPROCESSORS_ONLN));
    if (o.memory_mb == 0)
      o.memory_mb = std::max<int64_t>(
          1, static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE) >> 20);
  }
  const cluster::SlurmConfig c = cluster::MakeSlurmConfig(*job.cluster, o);
  std::filesystem::create_directories(a.out);
  Write(a.out + "/slurm.conf", c.slurm_conf);
  Write(a.out + "/topology.conf", c.topology_conf);
  if (!c.gres_conf.empty()) Write(a.out + "/gres.conf", c.gres_conf);
  std::cout << fmt::format("{}: slurm.conf, topology.conf{} for {} nodes ({}), partition {}\n",
                           a.out, c.gres_conf.empty() ? "" : ", gres.conf", c.nodes.size(),
                           cluster::HostList(o.node_prefix,
                                             [&] {
                                               std::vector<int64_t> v;
                                               for (size_t i = 1; i <= c.nodes.size(); ++i)
                                                 v.push_back(static_cast<int64_t>(i));
                                               return v;
                                             }()),
                           o.partition);
  return 0;
}

}  // namespace

Runner AddSlurmCommand(CLI::App& app) {
  auto a = std::make_shared<SlurmArgs>();
  CLI::App* cmd = app.add_subcommand("slurm", "Slurm: the configuration of a job's cluster");
  cmd->require_subcommand(1);
  CLI::App* config = cmd->add_subcommand(
      "config", "write slurm.conf, topology.conf (node -> rack leaf -> spine) and gres.conf");
  config->add_option("job", a->job, "job spec (TOML) with its [cluster]")
      ->required()
      ->check(ExistingFile());
  config->add_option("--cluster", a->cluster, "a cluster file instead of the job's [cluster]")
      ->check(ExistingFile());
  config->add_option("--out", a->out, "directory for the files (default slurm/)");
  config->add_option("--catalog", a->catalog_dir, "catalog directory");
  cluster::SlurmConfigOptions& o = a->options;
  config->add_option("--cluster-name", o.cluster_name, "ClusterName (default: the job's name)");
  config->add_option("--controller", o.controller, "SlurmctldHost (default ctl)");
  config->add_option("--controller-addr", o.controller_addr, "its address, when not by name");
  config->add_option("--node-prefix", o.node_prefix,
                     "node names are PREFIX1..PREFIXn (default sn)");
  config->add_option("--node-addr-base", o.node_addr_base,
                     "NodeAddr = BASE + (10 + i), e.g. 10.77.0. (default: by name)");
  config->add_option("--partition", o.partition, "the partition (default fmstack)");
  config->add_option("--cpus", o.cpus, "CPUs per node (default: the instance's vCPUs)")
      ->check(Between(1, 1 << 20));
  config->add_option("--memory-mb", o.memory_mb, "RealMemory per node (default: the instance's)")
      ->check(Between(1, 1 << 30));
  config->add_option("--state-dir", o.state_dir, "StateSaveLocation");
  config->add_option("--spool-dir", o.spool_dir, "SlurmdSpoolDir (one directory per node below)");
  config->add_option("--log-dir", o.log_dir, "where slurmctld and slurmd log");
  config->add_option("--munge-socket", o.munge_socket, "munged's socket (default: munge's own)");
  config->add_option("--health-check", o.health_check,
                     "HealthCheckProgram: deploy/slurm/fmstack-healthcheck.sh, installed on "
                     "every node");
  config->add_option("--accounting-host", o.accounting_host,
                     "slurmdbd's address: jobs and steps are recorded for sacct (default: none)");
  config->add_option("--slurmctld-port", o.slurmctld_port, "SlurmctldPort (default Slurm's, 6817)")
      ->check(Between(1, 65535));
  config
      ->add_option("--accounting-port", o.accounting_port,
                   "slurmdbd's port, AccountingStoragePort (default Slurm's, 6819)")
      ->check(Between(1, 65535));
  config->add_option("--health-check-interval", o.health_check_interval, "seconds")
      ->check(Between(1, 86400));
  return [a, config] { return config->parsed() ? Config(*a) : 1; };
}

}  // namespace fmstack::cli
