#include "cluster/netns.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "util/program.h"

namespace fmstack::cluster {
namespace {

bool LinkExists(const std::string& name) {
  return RunProgram({"ip", "link", "show", name}, 60).ok;
}

// The output of `ip` with `args`; fails the test when it does not exit 0
// within a minute.
std::string IpOutput(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  const ProgramResult r = RunProgram(argv, 60, {}, 1 << 20);
  EXPECT_TRUE(r.ok) << fmt::format("ip {}", fmt::join(args, " ")) << ": " << r.how << ": "
                    << r.output;
  return r.output;
}

// The bridge a supervisor of this pid tries first is there already (a
// killed run's, or another pid namespace's): the network takes the next
// alternative, works, and leaves the other bridge alone when it goes.
TEST(NodeNetwork, ABridgeThatIsThereAlreadyIsLeftAloneAndAnotherTaken) {
  ASSERT_EQ(::geteuid(), 0) << "network namespaces need root (the CI runs as root)";
  const std::string first = fmt::format("fmbr{}", ::getpid() % 10000000);
  ASSERT_FALSE(LinkExists(first)) << first << " is there before the test";
  ASSERT_TRUE(RunProgram({"ip", "link", "add", first, "type", "bridge"}, 60).ok) << first;
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
  EXPECT_TRUE(RunProgram({"ip", "link", "del", first}, 60).ok) << first;
}

// Every link a node's packets cross, its eth0, the veth's end on the
// bridge and the bridge, carries kLinkMtu, not Ethernet's 1500.
TEST(NodeNetwork, EveryLinkCarriesTheNetworksMtu) {
  ASSERT_EQ(::geteuid(), 0) << "network namespaces need root (the CI runs as root)";
  const NodeNetwork net(2);
  const std::string mtu = fmt::format(" mtu {} ", kLinkMtu);
  for (const std::string& path : net.namespace_paths()) {
    const std::string ns = path.substr(path.rfind('/') + 1);
    EXPECT_NE(IpOutput({"-n", ns, "link", "show", "eth0"}).find(mtu), std::string::npos) << ns;
  }
  std::vector<std::string> links = net.host_ends();
  links.push_back(net.bridge());
  EXPECT_EQ(links.size(), 3u);
  for (const std::string& link : links)
    EXPECT_NE(IpOutput({"link", "show", link}).find(mtu), std::string::npos) << link;
}

}  // namespace
}  // namespace fmstack::cluster
