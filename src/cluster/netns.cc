#include "cluster/netns.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/program.h"

namespace fmstack::cluster {
namespace {

// What one `ip` call may take: netlink requests that the kernel answers in
// milliseconds, unless it is stuck tearing down links (then we say so).
constexpr double kIpDeadlineSeconds = 30;

// Runs `ip` with `args` (words split at spaces: names and addresses only);
// returns its output, throws Error with it when it fails or overruns.
std::string Ip(const std::string& args) {
  std::vector<std::string> argv{"ip"};
  for (size_t at = 0; at < args.size();) {
    const size_t end = std::min(args.find(' ', at), args.size());
    if (end > at) argv.push_back(args.substr(at, end - at));
    at = end + 1;
  }
  const ProgramResult r = RunProgram(argv, kIpDeadlineSeconds, {}, 64 << 10);
  if (!r.ok) {
    throw Error(fmt::format("network namespaces: `ip {}` {}: {}", args, r.how,
                            r.output.empty() ? "(no output; is iproute2 installed?)" : r.output));
  }
  return r.output;
}

}  // namespace

NodeNetwork::NodeNetwork(int nodes) {
  if (::geteuid() != 0) {
    throw Error(
        "network namespaces for local nodes need root (CAP_NET_ADMIN); run without "
        "netns, or as root");
  }
  ClaimBridge(static_cast<int>(::getpid()));
  const std::string tag = bridge_.substr(4);  // the pid, and a letter for an alternative
  const std::string net = subnet_.substr(0, subnet_.size() - 5);  // "10.x.y"
  try {
    for (int k = 0; k < nodes; ++k) {
      const std::string ns = fmt::format("fmstack-{}-n{}", tag, k);
      const std::string host_end = fmt::format("fmv{}n{}", tag, k);
      const std::string ip = fmt::format("{}.{}", net, 10 + k);
      // A supervisor that exec'ed itself again (same pid) may find its
      // former namespaces' links still being torn down by the kernel.
      for (const std::string& stale : {"link del " + host_end, "netns del " + ns}) {
        try {
          Ip(stale);
        } catch (const Error&) {
        }
      }
      Ip("netns add " + ns);
      names_.push_back(ns);
      Ip(fmt::format("link add {} type veth peer name eth0 netns {}", host_end, ns));
      host_ends_.push_back(host_end);
      Ip(fmt::format("link set {} mtu {} master {} up", host_end, kLinkMtu, bridge_));
      Ip(fmt::format("-n {} addr add {}/24 dev eth0", ns, ip));
      Ip(fmt::format("-n {} link set eth0 mtu {} up", ns, kLinkMtu));
      Ip(fmt::format("-n {} link set lo up", ns));
      node_ips_.push_back(ip);
      paths_.push_back("/run/netns/" + ns);
    }
  } catch (...) {
    Teardown();
    throw;
  }
}

// A bridge and a /24 per supervisor, picked from its pid so that concurrent
// jobs differ. When that bridge or subnet is there already (left by a
// killed run, or made by a process with the same pid in another pid
// namespace on this network), the next of a few alternatives: creating the
// bridge is what claims it, so a link that is not ours is never touched.
void NodeNetwork::ClaimBridge(int pid) {
  constexpr int kTries = 8;
  std::string why;
  for (int attempt = 0; attempt < kTries; ++attempt) {
    const std::string net =
        fmt::format("10.{}.{}", 100 + ((pid >> 8) + 37 * attempt) % 100, pid % 256);
    const std::string name = fmt::format(
        "fmbr{}{}", pid % 10000000,
        attempt == 0 ? std::string() : std::string(1, static_cast<char>('a' + attempt)));
    if (!Ip(fmt::format("route show {}.0/24", net)).empty()) {
      why = net + ".0/24 has a route already";
      continue;
    }
    try {
      Ip(fmt::format("link add {} type bridge", name));
    } catch (const Error& e) {
      why = e.what();
      continue;
    }
    bridge_ = name;
    bridge_ip_ = net + ".1";
    subnet_ = net + ".0/24";
    try {
      Ip(fmt::format("addr add {}/24 dev {}", bridge_ip_, bridge_));
      Ip(fmt::format("link set {} mtu {} up", bridge_, kLinkMtu));
    } catch (...) {
      Teardown();
      throw;
    }
    return;
  }
  throw Error(fmt::format(
      "network namespaces: no free bridge and /24 for supervisor pid {} in {} tries; the last: {}",
      pid, kTries, why));
}

NodeNetwork::~NodeNetwork() {
  Teardown();
}

void NodeNetwork::Teardown() {
  // Deleting a namespace deletes its veth end, and with it the host end,
  // but only once the kernel frees the namespace: the links go first, now.
  for (const std::string& link : host_ends_) {
    try {
      Ip("link del " + link);
    } catch (const Error&) {
    }
  }
  host_ends_.clear();
  for (const std::string& ns : names_) {
    try {
      Ip("netns del " + ns);
    } catch (const Error&) {
    }
  }
  names_.clear();
  if (!bridge_.empty()) {
    try {
      Ip("link del " + bridge_);
    } catch (const Error&) {
    }
    bridge_.clear();
  }
}

void NodeNetwork::SetLink(int node, bool up) {
  Ip(fmt::format("-n {} link set eth0 {}", names_.at(static_cast<size_t>(node)),
                 up ? "up" : "down"));
}

bool NodeNetwork::LinkUp(int node) const {
  const std::string out =
      Ip(fmt::format("-n {} -o link show eth0", names_.at(static_cast<size_t>(node))));
  return out.find(",UP") != std::string::npos || out.find("<UP") != std::string::npos;
}

}  // namespace fmstack::cluster
