#include "cluster/slurm.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "util/error.h"
#include "util/program.h"

namespace fmstack::cluster {
namespace {

// Output of a Slurm command for large clusters: a million nodes' names fit.
constexpr size_t kMaxOutput = 64 << 20;
constexpr int kSlurmdPort = 6818;

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// Runs a Slurm client command; throws Error naming it with what it printed.
std::string Slurm(const std::vector<std::string>& argv, double deadline, const std::string& what) {
  const ProgramResult r = RunProgram(argv, deadline, {}, kMaxOutput);
  if (r.ok) return r.output;
  std::string cmd;
  for (const std::string& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  std::string said = Trim(r.output);
  if (said.size() > 400) said = said.substr(0, 400) + "...";
  throw Error(fmt::format("{}: `{}` {}{}", what, cmd, r.how, said.empty() ? "" : ": " + said));
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

}  // namespace

std::string ScontrolField(const std::string& line, const std::string& key) {
  size_t at = 0;
  for (;;) {
    at = line.find(key + "=", at);
    if (at == std::string::npos) return "";
    if (at == 0 || line[at - 1] == ' ') break;
    ++at;
  }
  const size_t begin = at + key.size() + 1;
  // A value ends where the next " Key=" begins (reasons hold spaces).
  size_t end = begin;
  while (end < line.size()) {
    const size_t sp = line.find(' ', end);
    if (sp == std::string::npos) return line.substr(begin);
    size_t k = sp + 1;
    while (k < line.size() && (std::isalnum(static_cast<unsigned char>(line[k])) ||
                               line[k] == '_' || line[k] == ':' || line[k] == '/'))
      ++k;
    if (k > sp + 1 && k < line.size() && line[k] == '=') return line.substr(begin, sp - begin);
    end = sp + 1;
  }
  return line.substr(begin);
}

SlurmAllocation ReadAllocation(double deadline) {
  SlurmAllocation a;
  a.job_id = Env("SLURM_JOB_ID");
  const std::string list = Env("SLURM_JOB_NODELIST");
  if (a.job_id.empty() || list.empty())
    throw Error(
        "the Slurm backend runs the supervisor inside an allocation: SLURM_JOB_ID and "
        "SLURM_JOB_NODELIST are not set (submit with `fmstack run JOB --backend slurm` from a "
        "login node, or run it in `salloc`)");
  a.here = Env("SLURMD_NODENAME");
  a.restart_count = std::atoi(Env("SLURM_RESTART_COUNT").c_str());
  const std::vector<std::string> names =
      Lines(Slurm({"scontrol", "show", "hostnames", list}, deadline, "the allocation's nodes"));
  if (names.empty()) throw Error(fmt::format("SLURM_JOB_NODELIST '{}' names no node", list));
  std::vector<std::string> show{"scontrol", "show", "node", "-o"};
  std::string joined;
  for (const std::string& n : names) joined += (joined.empty() ? "" : ",") + n;
  show.push_back(joined);
  std::map<std::string, std::string> addr;
  for (const std::string& line : Lines(Slurm(show, deadline, "the nodes' addresses"))) {
    const std::string name = ScontrolField(line, "NodeName");
    std::string address = ScontrolField(line, "NodeAddr");
    if (!name.empty()) addr[name] = address.empty() ? name : address;
  }
  for (const std::string& n : names) {
    in_addr probe{};
    const std::string address = addr.contains(n) ? addr[n] : n;
    if (::inet_pton(AF_INET, address.c_str(), &probe) != 1)
      throw Error(fmt::format(
          "node {}: NodeAddr '{}' is not an IPv4 address (fmstack's workers bind and dial by "
          "address: set NodeAddr in slurm.conf)",
          n, address));
    a.hosts.push_back({n, address});
  }
  a.master_addr = Env("FMSTACK_MASTER_ADDR");
  if (a.master_addr.empty()) {
    for (const SlurmHost& h : a.hosts) {
      if (h.name == a.here) a.master_addr = h.addr;
    }
  }
  if (a.master_addr.empty())
    throw Error(fmt::format(
        "this process runs on '{}', not on a node of job {}: set FMSTACK_MASTER_ADDR to an "
        "address of this machine that the nodes reach",
        a.here.empty() ? "a login node" : a.here, a.job_id));
  return a;
}

std::vector<std::string> SrunPrefix(const SlurmAllocation& a, const SlurmHost& host,
                                    const std::string& step_name) {
  // --overlap: a step may start while an earlier one on the node is still
  // being cleaned up (a restart); --input=none: the task reads no stdin.
  return {"srun",
          "--jobid=" + a.job_id,
          "--nodes=1",
          "--ntasks=1",
          "--nodelist=" + host.name,
          "--overlap",
          "--input=none",
          "--kill-on-bad-exit=0",
          "--job-name=" + step_name,
          "--quiet",
          "--"};
}

std::vector<std::string> ProbeSlurmd(const std::vector<SlurmHost>& hosts, double deadline) {
  std::vector<std::string> why(hosts.size());
  std::vector<pollfd> fds;
  std::vector<size_t> of;  // fds[i] probes hosts[of[i]]
  for (size_t i = 0; i < hosts.size(); ++i) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(kSlurmdPort);
    if (::inet_pton(AF_INET, hosts[i].addr.c_str(), &a.sin_addr) != 1) {
      why[i] = fmt::format("'{}' is not an address", hosts[i].addr);
      continue;
    }
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      why[i] = std::strerror(errno);
      continue;
    }
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      ::close(fd);
      continue;
    }
    if (errno != EINPROGRESS) {
      why[i] = fmt::format("slurmd at {}:{}: {}", hosts[i].addr, kSlurmdPort, std::strerror(errno));
      ::close(fd);
      continue;
    }
    fds.push_back({fd, POLLOUT, 0});
    of.push_back(i);
  }
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(deadline * 1e3));
  size_t open = fds.size();
  while (open > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0 || ::poll(fds.data(), fds.size(), static_cast<int>(left.count())) <= 0)
      break;
    for (pollfd& p : fds) {
      if (p.fd < 0 || p.revents == 0) continue;
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      const size_t i = of[static_cast<size_t>(&p - fds.data())];
      if (err != 0)
        why[i] = fmt::format("slurmd at {}:{}: {}", hosts[i].addr, kSlurmdPort, std::strerror(err));
      ::close(p.fd);
      p.fd = -1;  // poll ignores it from now
      --open;
    }
  }
  for (size_t k = 0; k < fds.size(); ++k) {
    if (fds[k].fd < 0) continue;
    ::close(fds[k].fd);
    why[of[k]] = fmt::format("slurmd at {}:{} did not answer within {:.1f} s", hosts[of[k]].addr,
                             kSlurmdPort, deadline);
  }
  return why;
}

void ShrinkAllocation(const SlurmAllocation& a, const std::vector<std::string>& keep,
                      double deadline) {
  std::string list;
  for (const std::string& n : keep) list += (list.empty() ? "" : ",") + n;
  Slurm({"scontrol", "update", "JobId=" + a.job_id, "NodeList=" + list}, deadline,
        fmt::format("releasing nodes from job {}", a.job_id));
}

void PingController(double deadline) {
  const ProgramResult r = RunProgram({"scontrol", "ping"}, deadline);
  if (r.ok && r.output.find(" is UP") != std::string::npos) return;
  throw Error(
      fmt::format("slurmctld is unreachable: `scontrol ping` {}{} (is SLURM_CONF{} right, and the "
                  "controller running?)",
                  r.timed_out ? fmt::format("got no answer within {:.0f} s", deadline) : r.how,
                  Trim(r.output).empty() ? "" : ": " + Trim(r.output),
                  Env("SLURM_CONF").empty() ? "" : " = " + Env("SLURM_CONF")));
}

PartitionInfo FindPartition(const std::string& name, double deadline) {
  const std::vector<std::string> lines =
      Lines(Slurm({"scontrol", "show", "partition", "-o"}, deadline, "the cluster's partitions"));
  std::vector<std::string> names;
  for (const std::string& line : lines) {
    PartitionInfo p;
    p.name = ScontrolField(line, "PartitionName");
    p.nodes = ScontrolField(line, "Nodes");
    p.state = ScontrolField(line, "State");
    p.total_nodes = std::atoi(ScontrolField(line, "TotalNodes").c_str());
    p.is_default = ScontrolField(line, "Default") == "YES";
    names.push_back(p.name + (p.is_default ? " (default)" : ""));
    if (name.empty() ? p.is_default : p.name == name) return p;
  }
  std::string all;
  for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
  if (name.empty())
    throw Error(
        fmt::format("the cluster has no default partition: name one with --partition "
                    "(its partitions: {})",
                    all.empty() ? "none" : all));
  throw Error(fmt::format("partition '{}' does not exist; the cluster's partitions: {}", name,
                          all.empty() ? "none" : all));
}

std::string Submit(const SubmitRequest& r, double deadline) {
  std::vector<std::string> argv{"sbatch", "--parsable", "--job-name=" + r.job_name,
                                // A requeued job whose node died still starts
                                // on what is left: spares when there are any.
                                r.spares > 0
                                    ? fmt::format("--nodes={}-{}", r.nodes, r.nodes + r.spares)
                                    : fmt::format("--nodes={}", r.nodes),
                                "--exclusive", "--requeue",
                                // A requeued run adds to the output, as to its logs.
                                "--open-mode=append", "--output=" + r.output, "--chdir=" + r.chdir};
  if (!r.partition.empty()) argv.push_back("--partition=" + r.partition);
  if (r.gpus_per_node > 0) argv.push_back(fmt::format("--gres=gpu:{}", r.gpus_per_node));
  if (r.warn_seconds > 0) argv.push_back(fmt::format("--signal=B:USR1@{}", r.warn_seconds));
  argv.push_back(r.script);
  const std::vector<std::string> lines = Lines(Slurm(argv, deadline, "submitting the job"));
  // --parsable prints "ID" or "ID;cluster" last; warnings may precede it.
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const std::string id = it->substr(0, it->find(';'));
    if (!id.empty() && id.find_first_not_of("0123456789") == std::string::npos) return id;
  }
  throw Error("sbatch printed no job id: " + (lines.empty() ? "nothing" : lines.back()));
}

bool JobStatus::finished() const {
  static constexpr const char* kEnd[] = {"COMPLETED", "FAILED",    "CANCELLED",     "TIMEOUT",
                                         "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "DEADLINE"};
  if (!known) return true;
  for (const char* s : kEnd) {
    if (state == s) return true;
  }
  return false;
}

JobStatus QueryJob(const std::string& id, double deadline) {
  JobStatus s;
  const ProgramResult r = RunProgram({"scontrol", "show", "job", "-o", id}, deadline);
  if (!r.ok) {
    if (r.output.find("Invalid job id") != std::string::npos) return s;
    throw Error(fmt::format("job {}: `scontrol show job` {}: {}", id, r.how, Trim(r.output)));
  }
  const std::vector<std::string> lines = Lines(r.output);
  if (lines.empty()) return s;
  s.known = true;
  s.state = ScontrolField(lines[0], "JobState");
  s.reason = ScontrolField(lines[0], "Reason");
  s.nodes = ScontrolField(lines[0], "NodeList");
  s.batch_host = ScontrolField(lines[0], "BatchHost");
  s.restarts = std::atoi(ScontrolField(lines[0], "Restarts").c_str());
  return s;
}

}  // namespace fmstack::cluster
