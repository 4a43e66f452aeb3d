// cli: the OpenMPI peer of `fmstack bench comm` (bench_comm_mpi.h).
#include "cli/bench_comm_mpi.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string_view>
#include <thread>

#include "cluster/netns.h"
#include "util/error.h"
#include "util/program.h"

namespace fmstack::cli {

// `mca`: extra --mca settings, e.g. the shared-memory BTL's single-copy
// mechanism. Throws when mpirun fails, with its output.
CollectiveTimes RunMpi(const MpiSweep& sweep, int n, const std::string& btl,
                       const std::string& mca) {
  const std::string cmd = fmt::format(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 1800 mpirun "
      "--oversubscribe --bind-to none -np {} --mca btl {} {} {} {} {} 2>&1",
      n, btl, mca, sweep.bench, sweep.min_bytes, sweep.max_bytes);
  if (::isatty(2) == 1)
    std::cerr << fmt::format("\r\033[K  OpenMPI np={} btl={}", n, btl) << std::flush;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) throw Error("cannot run mpirun");
  CollectiveTimes r;
  std::string all;
  char line[4096];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    all += line;
    char op[64];
    size_t bytes = 0;
    double seconds = 0;
    if (std::sscanf(line, "%63s %zu %lf", op, &bytes, &seconds) == 3) r[{op, bytes}] = seconds;
  }
  const int status = ::pclose(p);
  if (::isatty(2) == 1) std::cerr << "\r\033[K";
  if (status != 0) throw Error(fmt::format("OpenMPI peer failed ({}):\n{}", cmd, all));
  return r;
}

// OpenMPI's shared-memory transport as its documentation recommends for
// large messages: vader with the CMA single-copy mechanism (process_vm_readv),
// which a container may forbid; then the default, said so in the output.
CollectiveTimes RunMpiShm(const MpiSweep& sweep, int n, std::string* config) {
  try {
    CollectiveTimes r = RunMpi(sweep, n, "vader,self", "--mca btl_vader_single_copy_mechanism cma");
    *config = "vader, single copy by CMA";
    return r;
  } catch (const Error& e) {
    std::cerr << "OpenMPI with CMA single copy failed; running its default instead:\n"
              << std::string(e.what()).substr(0, 400) << "\n";
    *config = "vader, default (CMA unavailable here)";
    return RunMpi(sweep, n, "vader,self");
  }
}

namespace {

// OpenMPI's launch agent for nodes in network namespaces: mpirun calls it as
// it would call ssh, `agent HOST COMMAND...`, and it runs the command (OpenMPI's
// daemon) in the namespace whose node has address HOST. A script in a private
// temporary directory, removed with this object.
class NamespaceAgent {
 public:
  explicit NamespaceAgent(const cluster::NodeNetwork& net) {
    std::string dir_template = "/tmp/fmstack-mpi-agent-XXXXXX";
    if (::mkdtemp(dir_template.data()) == nullptr) {
      throw Error(
          fmt::format("bench comm: cannot make a directory for OpenMPI's launch agent "
                      "in /tmp: {}",
                      std::strerror(errno)));
    }
    dir_ = dir_template;
    path_ = dir_ / "agent.sh";
    std::ofstream out(path_);
    out << "#!/bin/sh\n# `fmstack bench comm --netns`: starts OpenMPI's daemon for node $1 in "
           "its network namespace\nhost=$1; shift\ncase \"$host\" in\n";
    for (size_t k = 0; k < net.node_addresses().size(); ++k) {
      out << fmt::format("  {}) exec nsenter --net={} sh -c \"$*\" ;;\n", net.node_addresses()[k],
                         net.namespace_paths()[k]);
    }
    out << "esac\necho \"fmstack mpi agent: no namespace has address $host\" >&2\nexit 1\n";
    out.close();
    if (!out || ::chmod(path_.c_str(), 0700) != 0) {
      std::filesystem::remove_all(dir_);
      throw Error("bench comm: cannot write OpenMPI's launch agent " + path_.string());
    }
  }
  ~NamespaceAgent() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  NamespaceAgent(const NamespaceAgent&) = delete;
  NamespaceAgent& operator=(const NamespaceAgent&) = delete;
  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_, path_;
};

// What OpenMPI said, not the command line before it (RunMpi's error is
// "OpenMPI peer failed (COMMAND):\nOUTPUT"), cut to a few lines.
std::string MpiOutputHead(std::string_view error) {
  const size_t at = error.find("):\n");
  const std::string_view output = at == std::string_view::npos ? error : error.substr(at + 3);
  return std::string(output.substr(0, 600));
}

}  // namespace

// OpenMPI across n nodes in network namespaces, the peer of fmstack's --netns
// column: one rank per namespace, its TCP transport (and mpirun's own
// connections) on the namespaces' bridge.
CollectiveTimes RunMpiNetns(const MpiSweep& sweep, int n) {
  const cluster::NodeNetwork net(n);
  const NamespaceAgent agent(net);
  std::string hosts;
  for (const std::string& ip : net.node_addresses()) hosts += (hosts.empty() ? "" : ",") + ip;
  // Each namespace is a host with one rank, so OpenMPI cannot see that the
  // ranks outnumber the machine's cores and would spin in every wait. It
  // yields on its own when it knows (mpi_yield_when_idle, its documented
  // setting for oversubscription); here it is told.
  const bool oversubscribed = n > static_cast<int>(std::thread::hardware_concurrency());
  // rtc_hwloc_vmhole none: the daemon keeps its hardware topology to itself
  // instead of writing it into shared memory at an address it guesses free.
  // On the AMD VM that write crashed OpenMPI 4.1.4's daemon in one start of
  // a 3-round bench (segfault in hwloc_shmem_topology_write), ending the
  // bench; the ranks' transport is unchanged by it.
  // routed direct: every daemon talks to mpirun itself rather than through
  // a tree of daemons, as OpenMPI's own error advises. On the Zen 3 VM one
  // 4-namespace start ended with "ORTE does not know how to route a message
  // to the specified daemon" and took the whole bench with it. The ranks'
  // transport (btl tcp) is unchanged by it.
  const std::string mca = fmt::format(
      "--host {} --mca plm_rsh_agent {} --mca oob_tcp_if_include {} --mca "
      "btl_tcp_if_include {} --mca rtc_hwloc_vmhole none --mca routed direct{}",
      hosts, agent.path().string(), net.subnet(), net.subnet(),
      oversubscribed ? " --mca mpi_yield_when_idle 1" : "");
  // Every daemon of every namespace shares this host's name, and so the
  // session directory tree /tmp/ompi.HOST.UID/jf.FAMILY/...; a start whose
  // job family (a 16-bit hash) met a tree left by an earlier start failed
  // with "mkdir ... File exists" (2026-11-30, 8 namespaces, on a retry). Each
  // start gets a tree of its own, removed with the agent's directory.
  // A daemon that failed to start is the launcher's trouble, not the
  // transport's: up to kStarts starts, each failure said so.
  constexpr int kStarts = 3;
  for (int start = 1;; ++start) {
    const std::filesystem::path session = agent.dir() / fmt::format("session-{}", start);
    std::filesystem::create_directories(session);
    try {
      return RunMpi(sweep, n, "tcp,self",
                    fmt::format("{} --mca orte_tmpdir_base {}", mca, session.string()));
    } catch (const Error& e) {
      if (start == kStarts) throw;
      std::cerr << fmt::format(
          "OpenMPI across {} namespaces failed to start (start {} of {}); starting it again:\n"
          "{}\n",
          n, start, kStarts, MpiOutputHead(e.what()));
    }
  }
}

std::string MpiVersion() {
  const ProgramResult r = RunProgram({"mpirun", "--version"}, 30);
  if (!r.ok) return "unknown (mpirun --version " + r.how + ")";
  std::string v = r.output.substr(0, r.output.find('\n'));
  while (!v.empty() && v.back() == '\r') v.pop_back();
  return v.empty() ? "unknown" : v;
}
}  // namespace fmstack::cli
