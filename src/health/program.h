// health: run a program under a deadline, as the agent does for `command`
// checks and for scontrol. Safe to call from a process with threads.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace fmstack::health {

struct ProgramResult {
  bool ok = false;         // exited 0
  bool timed_out = false;  // killed (its process group) at the deadline
  std::string output;      // stdout and stderr, the first `max_output` bytes
  std::string how;         // "exited 2", "killed by signal 9", "could not start: ..."
};

ProgramResult RunProgram(const std::vector<std::string>& argv, double deadline_seconds,
                         const std::map<std::string, std::string>& env = {},
                         size_t max_output = 4096);

}  // namespace fmstack::health
