// sim: the cluster's communication hierarchy, from a ClusterSpec and its
// catalog entries: accelerators in scale-up domains (NVLink/NeuronLink),
// nodes with their NIC bandwidth, racks under ToR switches and a spine that
// may be oversubscribed. A parallel group (DP, TP, PP ...) is described by
// its size and the rank stride between its members, and maps to the link
// levels it crosses, innermost first, for the collective model.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/collectives.h"
#include "spec/cluster_spec.h"

namespace fmstack::sim {

struct NetworkOptions {
  double spine_oversubscription = 1.0;  // >1: less bandwidth between racks than inside one
  // No EFA/InfiniBand: TCP over the instance's ENA, at this share of the NIC
  // bandwidth and with kernel-stack latency (the seeds' "EFA vs TCP" case).
  bool tcp_only = false;
  double tcp_efficiency = 0.35;
  double efa_latency = 15e-6, tcp_latency = 60e-6, scaleup_latency = 3e-6;
  // What NCCL moves over a link, as a share of its line rate. Scale-up: NCCL's
  // maintainers put its protocol overhead on NVLink at about 20% (H100: 370
  // of 450 GB/s; A800: 160 of 200 GB/s at 8 GB, nccl-tests issue 212 and
  // NVIDIA/nccl issue 412). Network: 24 of 25 GB/s per HDR NIC, 48-49 of 50
  // per NDR NIC (the same threads, NVIDIA/nccl-tests issue 267).
  double scaleup_efficiency = 0.8, network_efficiency = 0.96;
};

struct Topology {
  int64_t accelerators = 0;
  int64_t per_node = 1;
  int64_t domain = 1;          // accelerators per scale-up domain
  int64_t nodes_per_rack = 0;  // 0 = one flat network
  LinkLevel scaleup;           // per accelerator, per direction
  LinkLevel network;           // per accelerator's share of its node's NICs
  NetworkOptions options;

  // The levels a group of `size` ranks, `stride` apart, crosses. Throws
  // Error when the group does not tile the cluster (size x stride > all).
  std::vector<LinkLevel> LevelsFor(int64_t size, int64_t stride) const;
};

// Throws Error naming the instance when the catalog lacks a bandwidth it needs.
Topology BuildTopology(const spec::ClusterSpec& cluster, const NetworkOptions& options = {});

}  // namespace fmstack::sim
