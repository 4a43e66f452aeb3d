// util: run a program under a deadline and capture what it prints: health
// checks' commands, scontrol, ip, the corpus reader. Safe to call from a
// process with threads (everything is built before fork).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace fmstack {

struct ProgramResult {
  bool ok = false;         // exited 0
  bool timed_out = false;  // killed (its process group) at the deadline
  std::string output;      // stdout and stderr, the first `max_output` bytes
  std::string how;         // "exited 2", "killed by signal 9", "could not start: ..."
};

ProgramResult RunProgram(const std::vector<std::string>& argv, double deadline_seconds,
                         const std::map<std::string, std::string>& env = {},
                         size_t max_output = 4096);

}  // namespace fmstack
