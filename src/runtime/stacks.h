// runtime: the stacks of a live process, kept for the incident that stops it.
//
// A hung rank is killed and restarted; without its stacks, where it hung is
// lost with it. The supervisor attaches gdb to the rank before the kill
// (ptrace: the supervisor is its parent) and writes every thread's
// backtrace next to the rank's log.
#pragma once

#include <sys/types.h>

#include <string>

namespace fmstack::runtime {

struct Stacks {
  bool ok = false;
  bool started = false;  // gdb ran (false: not installed)
  std::string text;      // gdb's output, at most `max_bytes`
  std::string why;       // when not ok: what went wrong, for the supervisor's log
};

// Every thread's backtrace of process `pid`, from `gdb -batch` (which
// detaches again; a stopped process stays stopped). Waits at most
// `deadline_seconds` for gdb, in all.
Stacks CaptureStacks(pid_t pid, double deadline_seconds, size_t max_bytes = 256 * 1024);

}  // namespace fmstack::runtime
