#include "sim/topology.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/error.h"

namespace fmstack::sim {

Topology BuildTopology(const spec::ClusterSpec& cluster, const NetworkOptions& options) {
  Topology t;
  t.options = options;
  t.per_node = std::max<int64_t>(1, cluster.instance.accelerators);
  t.accelerators = cluster.nodes * t.per_node;
  t.domain = std::max<int64_t>(1, cluster.scaleup_domain > 0 ? cluster.scaleup_domain : t.per_node);
  t.nodes_per_rack = cluster.nodes_per_rack;
  if (cluster.accelerator.scaleup_bandwidth <= 0 && t.domain > 1) {
    throw Error(fmt::format(
        "{}: cluster.instance = \"{}\": the catalog has no scale-up bandwidth for {}, so sim "
        "cannot time communication inside a node; pick an instance that has one (fmstack "
        "catalog list instances) or set cluster.scaleup_domain = 1",
        cluster.file, cluster.instance.name, cluster.accelerator.name));
  }
  if (cluster.instance.network_bandwidth <= 0 && cluster.nodes > 1) {
    throw Error(fmt::format(
        "{}: cluster.instance = \"{}\" has no network bandwidth in the catalog, so sim cannot "
        "time communication between its {} nodes; sim and plan model cloud instances (fmstack "
        "catalog list instances): give one with --cluster, or train this job with fmstack run",
        cluster.file, cluster.instance.name, cluster.nodes));
  }
  // Catalog scale-up figures are both directions together (H100: 900 GB/s).
  t.scaleup = {"scale-up", 1,
               cluster.accelerator.scaleup_bandwidth / 2 * options.scaleup_efficiency,
               options.scaleup_latency};
  const double nic = cluster.instance.network_bandwidth / static_cast<double>(t.per_node) *
                     options.network_efficiency;
  t.network = options.tcp_only
                  ? LinkLevel{"tcp", 1, nic * options.tcp_efficiency, options.tcp_latency}
                  : LinkLevel{cluster.instance.efa.empty() ? "network" : "efa", 1, nic,
                              options.efa_latency};
  return t;
}

std::vector<LinkLevel> Topology::LevelsFor(int64_t size, int64_t stride) const {
  if (size < 1 || stride < 1 || size * stride > accelerators) {
    throw Error(fmt::format("a group of {} ranks {} apart does not fit {} accelerators", size,
                            stride, accelerators));
  }
  std::vector<LinkLevel> levels;
  // Members sharing a scale-up domain talk over it; the rest over the network.
  const int64_t inside = std::clamp<int64_t>(domain / stride, 1, size);
  if (inside > 1) {
    LinkLevel l = scaleup;
    l.ranks = static_cast<int>(inside);
    levels.push_back(l);
  }
  const int64_t outside = size / inside;
  if (outside > 1) {
    LinkLevel l = network;
    l.ranks = static_cast<int>(outside);
    // A group wider than a rack pays the spine's oversubscription.
    const int64_t span_nodes = (size * stride + per_node - 1) / per_node;
    if (nodes_per_rack > 0 && span_nodes > nodes_per_rack) {
      l.bandwidth /= options.spine_oversubscription;
    }
    levels.push_back(l);
  }
  if (levels.empty()) levels.push_back(LinkLevel{"self", 1, 1, 0});
  return levels;
}

}  // namespace fmstack::sim
