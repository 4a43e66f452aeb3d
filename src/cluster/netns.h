// cluster: nodes of the local backend in their own network namespaces. Each
// node gets a namespace with one veth interface on a private bridge, so the
// traffic between "nodes" crosses a real network interface (with its MTU and
// its kernel path) instead of loopback. Needs root (CAP_NET_ADMIN) and
// iproute2; everything made is removed by the destructor.
#pragma once

#include <string>
#include <vector>

namespace fmstack::cluster {

// The MTU of every link of the node network (the bridge, both ends of each
// veth): loopback's, less one, the most a veth takes. A veth has no wire,
// and at Ethernet's 1500 bytes the TCP stacks of the nodes ran at half
// their speed: between two namespaces on the 2-vCPU AMD VM of 2026-11-30,
// a 2-rank allreduce of 1-16 MiB ran at 0.84-1.44 GB/s busbw over our TCP
// mesh and 0.66-1.13 over OpenMPI's, against 2.10-2.85 and 1.45-2.99 at
// this MTU (and 9000 was slower than 1500, for both); docs/comm.md.
inline constexpr int kLinkMtu = 65535;

class NodeNetwork {
 public:
  // Creates the bridge and `nodes` namespaces; throws Error (with the failing
  // `ip` command and its output) when it cannot.
  explicit NodeNetwork(int nodes);
  ~NodeNetwork();
  NodeNetwork(const NodeNetwork&) = delete;
  NodeNetwork& operator=(const NodeNetwork&) = delete;

  const std::string& bridge_address() const { return bridge_ip_; }  // the supervisor's side
  const std::string& subnet() const { return subnet_; }  // the bridge's, e.g. "10.1.2.0/24"
  const std::vector<std::string>& node_addresses() const { return node_ips_; }
  const std::vector<std::string>& namespace_paths() const { return paths_; }
  const std::string& bridge() const { return bridge_; }
  const std::vector<std::string>& host_ends() const { return host_ends_; }  // veth ends on it
  // Takes a node's link down (a cut cable, a dead NIC) or brings it back.
  void SetLink(int node, bool up);
  // Whether the node's interface is up.
  bool LinkUp(int node) const;

 private:
  void ClaimBridge(int pid);
  void Teardown();

  std::string bridge_, bridge_ip_, subnet_;
  std::vector<std::string> host_ends_;  // the veths' ends on the bridge
  std::vector<std::string> names_, node_ips_, paths_;
};

}  // namespace fmstack::cluster
