// spec: ClusterSpec — the hardware a job runs on, read from TOML (a
// cluster file, or a [cluster] table inside a job file). Instance figures come
// from the catalog; every one can be overridden in the spec.
#pragma once

#include <string>
#include <string_view>

#include "catalog/catalog.h"
#include "util/strict_table.h"

namespace fmstack::spec {

struct StorageSpec {
  bool configured = false;
  std::string tier;               // catalog storage name
  double capacity_bytes = 0;      // 0 = unbounded / not sized
  double write_bandwidth = 0;     // bytes/s, resolved: explicit, or per-TiB x capacity, or catalog
  double price_per_gb_month = 0;  // from the catalog unless overridden
};

// The instance name of a local-backend cluster without an `instance`: this
// machine, one "accelerator" per worker process.
inline constexpr const char* kLocalInstance = "local-cpu";

struct ClusterSpec {
  std::string file;
  // How `fmstack run` starts workers: "local" (processes on this machine),
  // "slurm" (a batch job, a srun step per rank); empty = a modelled cluster
  // for plan/sim only.
  std::string backend;
  int64_t procs_per_node = 0;  // workers per node (local and slurm backends)
  bool netns = false;          // local backend: each node in its own network namespace
  std::string partition;       // slurm backend: "" = the cluster's default
  catalog::Instance instance;  // copied from the catalog, overrides applied
  catalog::Accelerator accelerator;
  int64_t nodes = 1;
  int64_t spares = 0;
  int64_t nodes_per_rack = 0;    // nodes under one ToR switch; 0 = not modelled
  int64_t scaleup_domain = 0;    // accelerators per NVLink/NeuronLink domain
  double node_mtbf_seconds = 0;  // mean time between failures of one node; 0 = unknown
  double job_mtti_seconds = 0;   // if set, overrides node_mtbf / nodes
  double spot_fraction = 0;      // share of nodes on Spot
  double spot_discount = 0;      // Spot price = (1 - discount) x on-demand
  StorageSpec local, shared, object;

  int64_t accelerators() const { return nodes * instance.accelerators; }
  // Mean time to interrupt of a job that spans every node (0 = unknown).
  double JobMtti() const;
};

// Reads a [cluster] table (or a cluster file's root). `file` names it in errors.
ClusterSpec ReadClusterSpec(StrictTable& table, const catalog::Catalog& catalog);
ClusterSpec LoadClusterSpec(const std::string& path, const catalog::Catalog& catalog);
ClusterSpec ParseClusterSpec(std::string_view text, const std::string& name,
                             const catalog::Catalog& catalog);

}  // namespace fmstack::spec
