// health: the node checks, as data. A check table (TOML, `[[check]]` rows)
// says for each check what it looks at, how bad a failure is and what the
// node needs then (resilience::NodeAction), how often it runs and how long
// it may take. RunCheck carries one check out once; the agent (agent.h)
// schedules them under their deadlines.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "health/device.h"
#include "resilience/policy.h"

namespace fmstack::health {

enum class Severity { kInfo, kWarning, kCritical };
std::string_view SeverityName(Severity s);

struct CheckSpec {
  std::string name;  // unique in the table: "gpu-xid-fatal"
  std::string kind;  // xid | ecc | temperature | gpu-present | nic | disk | memory | clock
                     // | process | command
  Severity severity = Severity::kCritical;
  resilience::NodeAction action = resilience::NodeAction::kNone;
  double interval_seconds = 5;
  double deadline_seconds = 10;
  // Kind-specific parameters (absent = the kind's default).
  std::vector<int> codes;                // xid: the codes that fail the check
  int64_t max_count = 0;                 // ecc: uncorrected errors tolerated
  double max_celsius = 87;               // temperature
  int64_t expect_devices = -1;           // gpu-present: -1 = as many as at the agent's start
  std::string interface = "auto";        // nic: "auto" = the one carrying the node's address
  std::string path;                      // disk: "" = the run directory
  double min_free_bytes = 1 << 30;       // disk
  double min_available_bytes = 1 << 28;  // memory
  double max_error_seconds = 0.5;        // clock: the kernel's estimated maximum error
  bool require_sync = false;             // clock: an unsynchronized clock fails
  double stuck_seconds = 10;             // process: stopped (T) or in D state this long
  std::vector<std::string> command;      // command: argv; fails on a non-zero exit
};

// The kinds RunCheck knows.
const std::vector<std::string>& CheckKinds();

// Parses a check table; throws SpecError naming file:line, the [[check]]
// row and the key. `file` names the text for messages.
std::vector<CheckSpec> ParseCheckTable(std::string_view text, const std::string& file);
// The table fmstack ships (deploy/health/checks.toml, embedded).
std::string_view DefaultCheckTableText();

// What one node is, for the checks that need it.
struct NodeContext {
  std::string name;                       // "node1"
  std::string host;                       // the address its workers use ("" = loopback)
  std::string run_dir;                    // disk: the default path
  std::shared_ptr<DeviceSource> devices;  // shared with checks still running
  int expect_devices = 0;                 // gpu-present default: the count at the agent's start
  std::map<int, int> pids;                // process: rank -> pid of the node's workers
};

struct Outcome {
  bool ok = true;
  std::string reason;  // why it failed ("xid 79 on gpu 0"), or what it saw when ok
  double seconds = 0;  // how long the check took
  bool timed_out = false;
};

// A /proc/meminfo field ("MemAvailable") in bytes; -1 when it is absent.
double MemInfoBytes(const std::string& key);

// Carries one check out. Never throws: an error is a failed outcome.
// `process_since`: per pid, when it was first seen stopped or in D state
// (the process check's memory between runs; nullptr for one-off runs).
Outcome RunCheck(const CheckSpec& spec, const NodeContext& node,
                 std::map<int, double>* process_since = nullptr);

}  // namespace fmstack::health
