#include "cluster/netns.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace fmstack::cluster {
namespace {

bool LinkExists(const std::string& name) {
  return std::system(fmt::format("ip link show {} > /dev/null 2>&1", name).c_str()) == 0;
}

// The output of a shell command; fails the test when it does not exit 0.
std::string Output(const std::string& cmd) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return "(cannot run " + cmd + ")";
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  EXPECT_EQ(::pclose(p), 0) << cmd << ": " << out;
  return out;
}

// The bridge a supervisor of this pid tries first is there already (a
// killed run's, or another pid namespace's): the network takes the next
// alternative, works, and leaves the other bridge alone when it goes.
TEST(NodeNetwork, ABridgeThatIsThereAlreadyIsLeftAloneAndAnotherTaken) {
  ASSERT_EQ(::geteuid(), 0) << "network namespaces need root (the CI runs as root)";
  const std::string first = fmt::format("fmbr{}", ::getpid() % 10000000);
  ASSERT_FALSE(LinkExists(first)) << first << " is there before the test";
  ASSERT_EQ(std::system(fmt::format("ip link add {} type bridge", first).c_str()), 0);
  std::string taken;
  {
    const NodeNetwork net(2);
    ASSERT_EQ(net.node_addresses().size(), 2u);
    EXPECT_EQ(net.subnet().substr(net.subnet().size() - 5), ".0/24");
    EXPECT_TRUE(net.LinkUp(0) && net.LinkUp(1));
    const std::string net24 = net.subnet().substr(0, net.subnet().size() - 4);  // "10.x.y."
    EXPECT_EQ(net.node_addresses()[1], net24 + "11");
    taken = first + "b";
    EXPECT_TRUE(LinkExists(taken));
  }
  EXPECT_FALSE(LinkExists(taken)) << "the network's own bridge outlived it";
  EXPECT_TRUE(LinkExists(first)) << "the bridge that was there before was removed";
  EXPECT_EQ(std::system(fmt::format("ip link del {}", first).c_str()), 0);
}

// Every link a node's packets cross, its eth0, the veth's end on the
// bridge and the bridge, carries kLinkMtu, not Ethernet's 1500.
TEST(NodeNetwork, EveryLinkCarriesTheNetworksMtu) {
  ASSERT_EQ(::geteuid(), 0) << "network namespaces need root (the CI runs as root)";
  const NodeNetwork net(2);
  const std::string mtu = fmt::format(" mtu {} ", kLinkMtu);
  for (const std::string& path : net.namespace_paths()) {
    const std::string ns = path.substr(path.rfind('/') + 1);
    EXPECT_NE(Output("ip -n " + ns + " link show eth0").find(mtu), std::string::npos) << ns;
  }
  std::vector<std::string> links = net.host_ends();
  links.push_back(net.bridge());
  EXPECT_EQ(links.size(), 3u);
  for (const std::string& link : links)
    EXPECT_NE(Output("ip link show " + link).find(mtu), std::string::npos) << link;
}

}  // namespace
}  // namespace fmstack::cluster
