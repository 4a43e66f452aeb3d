#include "health/checks.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <sys/timex.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "util/program.h"
#include "util/strict_table.h"
#include "util/units.h"

namespace fmstack::health {

std::string_view SeverityName(Severity s) {
  switch (s) {
    case Severity::kInfo:
      return "info";
    case Severity::kWarning:
      return "warning";
    case Severity::kCritical:
      return "critical";
  }
  return "?";
}

const std::vector<std::string>& CheckKinds() {
  static const std::vector<std::string> kinds = {"xid",     "ecc",    "temperature", "gpu-present",
                                                 "nic",     "disk",   "memory",      "clock",
                                                 "process", "command"};
  return kinds;
}

// Xid meanings from NVIDIA's Xid catalog; the replace set follows the seeds
// (row-remap failure, fallen off the bus, uncontained errors).
std::string_view DefaultCheckTableText() {
  return R"(# fmstack node checks: one [[check]] per row.
# severity: info | warning | critical; action: none | drain | reboot | replace
# (what resilience/ gets to decide the job's side: drain = leave without loss,
# reboot/replace = the node is broken now and its ranks are lost).

[[check]]
name = "gpu-xid-replace"   # 63 row remap failure, 64 remap record failure,
kind = "xid"               # 79 fallen off the bus, 95 uncontained ECC error
codes = [63, 64, 79, 95]
severity = "critical"
action = "replace"
interval = "1s"
deadline = "5s"

[[check]]
name = "gpu-xid-reboot"    # 48 double-bit ECC, 74 NVLink, 92 high SBE rate,
kind = "xid"               # 94 contained ECC, 119/120 GSP errors
codes = [48, 74, 92, 94, 119, 120]
severity = "critical"
action = "reboot"
interval = "1s"
deadline = "5s"

[[check]]
name = "gpu-present"
kind = "gpu-present"
severity = "critical"
action = "replace"
interval = "1s"
deadline = "5s"

[[check]]
name = "gpu-ecc-dbe"
kind = "ecc"
max_count = 0
severity = "critical"
action = "reboot"
interval = "5s"
deadline = "5s"

[[check]]
name = "gpu-temperature"
kind = "temperature"
max_celsius = 87
severity = "warning"
action = "drain"
interval = "5s"
deadline = "5s"

[[check]]
name = "nic-link"
kind = "nic"
interface = "auto"
severity = "critical"
action = "replace"
interval = "1s"
deadline = "2s"

[[check]]
name = "disk-space"
kind = "disk"
min_free = "1GiB"
severity = "critical"
action = "drain"
interval = "10s"
deadline = "10s"

[[check]]
name = "memory-available"
kind = "memory"
min_available = "256MiB"
severity = "warning"
action = "none"
interval = "5s"
deadline = "2s"

[[check]]
name = "clock"
kind = "clock"
max_error = "500ms"
require_sync = false
severity = "warning"
action = "none"
interval = "30s"
deadline = "2s"

[[check]]
name = "worker-processes"
kind = "process"
stuck = "10s"
severity = "warning"
action = "none"
interval = "2s"
deadline = "2s"
)";
}

std::vector<CheckSpec> ParseCheckTable(std::string_view text, const std::string& file) {
  static const std::vector<std::string> kSeverities = {"info", "warning", "critical"};
  static const std::vector<std::string> kActions = {"none", "drain", "reboot", "replace"};
  const toml::table doc = ParseTomlText(text, file);
  StrictTable root(doc, file, "");
  std::vector<CheckSpec> out;
  std::set<std::string> names;
  for (StrictTable& t : root.TableArray("check")) {
    CheckSpec c;
    c.name = t.String("name").value_or("");
    if (c.name.empty()) t.Fail("name", "missing: every check needs a unique name");
    if (!names.insert(c.name).second) t.Fail("name", "\"" + c.name + "\" is used by two checks");
    c.kind = t.Choice("kind", CheckKinds()).value_or("");
    if (c.kind.empty()) t.Fail("kind", "missing: what the check looks at");
    const std::string severity = t.Choice("severity", kSeverities).value_or("critical");
    c.severity = severity == "info"      ? Severity::kInfo
                 : severity == "warning" ? Severity::kWarning
                                         : Severity::kCritical;
    c.action = *resilience::ParseNodeAction(t.Choice("action", kActions).value_or("none"));
    c.interval_seconds = t.Seconds("interval").value_or(c.interval_seconds);
    c.deadline_seconds = t.Seconds("deadline").value_or(c.deadline_seconds);
    for (auto [key, v] :
         {std::pair{"interval", c.interval_seconds}, {"deadline", c.deadline_seconds}}) {
      if (!(v >= 0.05 && v <= 3600)) t.Fail(key, "expected a duration from 50ms to 1h");
    }
    if (c.kind == "xid") {
      const toml::node* n = t.Peek("codes");
      const toml::array* a = n != nullptr ? n->as_array() : nullptr;
      if (a == nullptr || a->empty()) t.Fail("codes", "expected a non-empty list of Xid codes");
      for (const toml::node& v : *a) {
        const std::optional<int64_t> code = v.value<int64_t>();
        if (!code || *code < 1 || *code > 1000)
          t.Fail("codes", "expected Xid codes: integers from 1 to 1000");
        c.codes.push_back(static_cast<int>(*code));
      }
    } else if (c.kind == "ecc") {
      c.max_count = t.Int("max_count", 0, int64_t{1} << 40).value_or(c.max_count);
    } else if (c.kind == "temperature") {
      c.max_celsius = t.Number("max_celsius", 0, 200).value_or(c.max_celsius);
    } else if (c.kind == "gpu-present") {
      c.expect_devices = t.Int("expect", 0, 1024).value_or(c.expect_devices);
    } else if (c.kind == "nic") {
      c.interface = t.String("interface").value_or(c.interface);
      if (c.interface.empty() || c.interface.size() > 15 ||
          c.interface.find('/') != std::string::npos || c.interface.starts_with('.'))
        t.Fail("interface", "expected a network interface name (at most 15 characters) or auto");
    } else if (c.kind == "disk") {
      c.path = t.String("path").value_or(c.path);
      c.min_free_bytes = t.Bytes("min_free").value_or(c.min_free_bytes);
    } else if (c.kind == "memory") {
      c.min_available_bytes = t.Bytes("min_available").value_or(c.min_available_bytes);
    } else if (c.kind == "clock") {
      c.max_error_seconds = t.Seconds("max_error").value_or(c.max_error_seconds);
      c.require_sync = t.Bool("require_sync").value_or(c.require_sync);
    } else if (c.kind == "process") {
      c.stuck_seconds = t.Seconds("stuck").value_or(c.stuck_seconds);
    } else if (c.kind == "command") {
      c.command = t.StringArray("command");
      if (c.command.empty() || c.command[0].empty())
        t.Fail("command", "expected the program and its arguments, [\"/path/prog\", \"arg\"]");
    }
    t.Finish();
    out.push_back(std::move(c));
  }
  root.Finish();
  if (out.size() > 256) throw Error(fmt::format("{}: {} checks; at most 256", file, out.size()));
  return out;
}

namespace {

Outcome Fail(std::string reason) {
  return {false, std::move(reason)};
}
Outcome Pass(std::string what = "ok") {
  return {true, std::move(what)};
}

Outcome CheckXid(const CheckSpec& c, const NodeContext& node) {
  for (const DeviceState& d : node.devices->Read()) {
    for (const int x : d.xids) {
      if (std::find(c.codes.begin(), c.codes.end(), x) != c.codes.end())
        return Fail(fmt::format("xid {} on gpu {}", x, d.index));
    }
  }
  return Pass();
}

Outcome CheckEcc(const CheckSpec& c, const NodeContext& node) {
  for (const DeviceState& d : node.devices->Read()) {
    if (d.ecc_dbe > c.max_count)
      return Fail(fmt::format("{} uncorrected ECC error(s) on gpu {} (at most {})", d.ecc_dbe,
                              d.index, c.max_count));
  }
  return Pass();
}

Outcome CheckTemperature(const CheckSpec& c, const NodeContext& node) {
  double hottest = 0;
  for (const DeviceState& d : node.devices->Read()) {
    if (d.temperature_c > c.max_celsius)
      return Fail(fmt::format("gpu {} at {:.0f} C (at most {:.0f} C)", d.index, d.temperature_c,
                              c.max_celsius));
    hottest = std::max(hottest, d.temperature_c);
  }
  return Pass(fmt::format("hottest {:.0f} C", hottest));
}

Outcome CheckPresent(const CheckSpec& c, const NodeContext& node) {
  const std::vector<DeviceState> devices = node.devices->Read();
  for (const DeviceState& d : devices) {
    if (!d.present) return Fail(fmt::format("gpu {} fell off the bus ({})", d.index, d.error));
    if (!d.error.empty()) return Fail(fmt::format("gpu {}: {}", d.index, d.error));
  }
  const int64_t expect = c.expect_devices >= 0 ? c.expect_devices : node.expect_devices;
  if (static_cast<int64_t>(devices.size()) < expect)
    return Fail(fmt::format("{} of {} gpus visible", devices.size(), expect));
  return Pass(fmt::format("{} gpus", devices.size()));
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

// The interface that carries `host`; with no host (an agent started by hand
// or by Slurm), the first interface up with an IPv4 address other than
// loopback, else loopback.
std::string InterfaceOf(const std::string& host) {
  if (host.empty()) {
    ifaddrs* list = nullptr;
    std::string first;
    if (::getifaddrs(&list) == 0) {
      for (ifaddrs* a = list; a != nullptr && first.empty(); a = a->ifa_next) {
        if (a->ifa_addr != nullptr && a->ifa_addr->sa_family == AF_INET &&
            (a->ifa_flags & IFF_LOOPBACK) == 0 && (a->ifa_flags & IFF_UP) != 0)
          first = a->ifa_name;
      }
      ::freeifaddrs(list);
    }
    if (!first.empty()) return first;
  }
  const std::string want = host.empty() ? "127.0.0.1" : host;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf) != nullptr && want == buf) {
      name = a->ifa_name;
      break;
    }
  }
  ::freeifaddrs(list);
  return name;
}

// Link state through getifaddrs (netlink), which answers for this process's
// network namespace; /sys/class/net shows the namespace sysfs was mounted in.
Outcome CheckNic(const CheckSpec& c, const NodeContext& node) {
  const std::string nic = c.interface == "auto" ? InterfaceOf(node.host) : c.interface;
  if (nic.empty())
    return Fail(fmt::format("no interface carries the node's address {}",
                            node.host.empty() ? "127.0.0.1" : node.host));
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return Fail(fmt::format("getifaddrs: {}", std::strerror(errno)));
  bool found = false;
  unsigned flags = 0;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_name != nullptr && nic == a->ifa_name) {
      found = true;
      flags |= a->ifa_flags;
    }
  }
  ::freeifaddrs(list);
  if (!found) return Fail(fmt::format("interface {} does not exist", nic));
  if ((flags & IFF_UP) == 0) return Fail(fmt::format("interface {} is down", nic));
  if ((flags & IFF_RUNNING) == 0) return Fail(fmt::format("interface {} has no carrier", nic));
  return Pass(fmt::format("{} up", nic));
}

Outcome CheckDisk(const CheckSpec& c, const NodeContext& node) {
  const std::string path = c.path.empty() ? node.run_dir : c.path;
  struct statvfs s {};
  if (::statvfs(path.c_str(), &s) != 0)
    return Fail(fmt::format("{}: {}", path, std::strerror(errno)));
  const double free = static_cast<double>(s.f_bavail) * static_cast<double>(s.f_frsize);
  if (free < c.min_free_bytes)
    return Fail(fmt::format("{}: {} free (at least {})", path, units::FormatBytes(free),
                            units::FormatBytes(c.min_free_bytes)));
  // A write that reaches the device: an I/O error or a read-only remount shows here.
  const std::string probe = fmt::format("{}/.fmstack-disk-probe-{}", path, ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Fail(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
  const char block[4096] = {};
  const bool wrote =
      ::write(fd, block, sizeof block) == static_cast<ssize_t>(sizeof block) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!wrote) return Fail(fmt::format("{}: write+fsync failed: {}", path, std::strerror(err)));
  return Pass(fmt::format("{}: {} free", path, units::FormatBytes(free)));
}

Outcome CheckMemory(const CheckSpec& c, const NodeContext&) {
  const double bytes = MemInfoBytes("MemAvailable");
  if (bytes < 0) return Fail("/proc/meminfo has no MemAvailable");
  if (bytes < c.min_available_bytes)
    return Fail(fmt::format("{} available (at least {})", units::FormatBytes(bytes),
                            units::FormatBytes(c.min_available_bytes)));
  return Pass(fmt::format("{} available", units::FormatBytes(bytes)));
}

Outcome CheckClock(const CheckSpec& c, const NodeContext&) {
  timex t{};
  const int state = ::adjtimex(&t);
  if (state < 0) return Fail(fmt::format("adjtimex: {}", std::strerror(errno)));
  const bool synced = state != TIME_ERROR;
  if (c.require_sync && !synced) return Fail("the clock is not synchronized (no NTP/PTP)");
  const double max_error = static_cast<double>(t.maxerror) * 1e-6;  // microseconds
  if (synced && max_error > c.max_error_seconds)
    return Fail(fmt::format("estimated clock error {:.3f} s (at most {:.3f} s)", max_error,
                            c.max_error_seconds));
  return Pass(synced ? fmt::format("error at most {:.3f} s", max_error) : "not synchronized");
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Outcome CheckProcesses(const CheckSpec& c, const NodeContext& node, std::map<int, double>* since) {
  std::map<int, double> local;
  std::map<int, double>& first = since != nullptr ? *since : local;
  const double now = NowSeconds();
  std::set<int> seen;
  for (const auto& [rank, pid] : node.pids) {
    const std::string stat = ReadSmallFile(fmt::format("/proc/{}/stat", pid));
    // The state follows the command name in parentheses, which may hold spaces.
    const size_t paren = stat.rfind(')');
    if (stat.empty() || paren == std::string::npos || paren + 2 >= stat.size()) continue;
    const char state = stat[paren + 2];
    if (state == 'Z') return Fail(fmt::format("rank {} (pid {}) is a zombie", rank, pid));
    if (state != 'T' && state != 't' && state != 'D') continue;
    seen.insert(pid);
    const double t0 = first.try_emplace(pid, now).first->second;
    if (now - t0 >= c.stuck_seconds)
      return Fail(fmt::format("rank {} (pid {}) has been {} for {:.0f} s", rank, pid,
                              state == 'D' ? "in uninterruptible sleep (D)" : "stopped (T)",
                              now - t0));
  }
  std::erase_if(first, [&](const auto& kv) { return !seen.contains(kv.first); });
  return Pass(fmt::format("{} worker process(es)", node.pids.size()));
}

// Runs argv with its output on a pipe; the check's deadline is the agent's,
// but a command is a process we can kill, so it gets the deadline itself.
Outcome CheckCommand(const CheckSpec& c, const NodeContext& node) {
  const ProgramResult r = RunProgram(c.command, c.deadline_seconds, {{"FMSTACK_NODE", node.name}});
  const std::string first_line = r.output.substr(0, r.output.find('\n'));
  if (r.ok) return Pass(first_line);
  Outcome o = Fail(
      fmt::format("{} {}{}", c.command[0], r.how,
                  r.timed_out ? "" : ": " + (first_line.empty() ? "(no output)" : first_line)));
  o.timed_out = r.timed_out;
  return o;
}

}  // namespace

double MemInfoBytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string name, unit;
  double kib = 0;
  while (in >> name >> kib >> unit) {
    if (name == key + ":") return kib * 1024;
  }
  return -1;
}

Outcome RunCheck(const CheckSpec& spec, const NodeContext& node,
                 std::map<int, double>* process_since) {
  const double t0 = NowSeconds();
  Outcome o;
  try {
    const bool needs_devices = spec.kind == "xid" || spec.kind == "ecc" ||
                               spec.kind == "temperature" || spec.kind == "gpu-present";
    if (needs_devices && node.devices == nullptr) {
      o = Fail("no device source on this node");
    } else if (spec.kind == "xid") {
      o = CheckXid(spec, node);
    } else if (spec.kind == "ecc") {
      o = CheckEcc(spec, node);
    } else if (spec.kind == "temperature") {
      o = CheckTemperature(spec, node);
    } else if (spec.kind == "gpu-present") {
      o = CheckPresent(spec, node);
    } else if (spec.kind == "nic") {
      o = CheckNic(spec, node);
    } else if (spec.kind == "disk") {
      o = CheckDisk(spec, node);
    } else if (spec.kind == "memory") {
      o = CheckMemory(spec, node);
    } else if (spec.kind == "clock") {
      o = CheckClock(spec, node);
    } else if (spec.kind == "process") {
      o = CheckProcesses(spec, node, process_since);
    } else if (spec.kind == "command") {
      o = CheckCommand(spec, node);
    } else {
      o = Fail("unknown check kind \"" + spec.kind + "\"");
    }
  } catch (const std::exception& e) {
    o = Fail(e.what());
  }
  o.seconds = NowSeconds() - t0;
  return o;
}

}  // namespace fmstack::health
