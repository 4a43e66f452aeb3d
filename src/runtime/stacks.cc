#include "runtime/stacks.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "util/program.h"

namespace fmstack::runtime {

namespace {

// What gdb said last (why an attach failed), at most 200 characters.
std::string LastLine(const std::string& output) {
  const size_t end = output.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const size_t start = output.rfind('\n', end);
  const size_t from = start == std::string::npos ? 0 : start + 1;
  return output.substr(from, std::min<size_t>(end + 1 - from, 200));
}

Stacks RunGdb(pid_t pid, bool debug_info, double deadline_seconds, size_t max_bytes) {
  // -nx: no ~/.gdbinit of whoever runs the supervisor; LC_ALL=C keeps the
  // output the same whatever the locale.
  std::vector<std::string> argv = {"gdb", "-batch", "-nx"};
  if (!debug_info) argv.emplace_back("--readnever");
  for (const char* a : {"-ex", "thread apply all bt"}) argv.emplace_back(a);
  argv.emplace_back("-p");
  argv.push_back(std::to_string(pid));
  const ProgramResult r = RunProgram(argv, deadline_seconds, {{"LC_ALL", "C"}}, max_bytes);
  Stacks s;
  s.text = r.output;
  s.started = r.how.rfind("could not start", 0) != 0;
  // gdb exits 0 after a failed attach too; a backtrace has frame "#0".
  s.ok = r.ok && r.output.find("\n#0 ") != std::string::npos;
  if (r.timed_out) {
    s.why = fmt::format("gdb did not finish within {:.0f} s", deadline_seconds);
  } else if (!s.started) {
    s.why = fmt::format("gdb {} (install gdb to keep a hung rank's stacks)", r.how);
  } else if (!r.ok) {
    s.why = fmt::format("gdb {}: {}", r.how, LastLine(r.output));
  } else if (!s.ok) {
    s.why = "gdb printed no backtrace: " + LastLine(r.output);
  }
  return s;
}

}  // namespace

Stacks CaptureStacks(pid_t pid, double deadline_seconds, size_t max_bytes) {
  // With the debug information, frames have files, lines and inlined
  // calls, but gdb reads it for seconds (5 s for fmstack's 143 MB binary on
  // a busy 2-core machine). Without it gdb answers in about half a second,
  // with function names only. So the names come first, and the full
  // backtrace replaces them when the rest of the budget lets gdb finish: on
  // a loaded 2-core Zen 5 VM, the full try first (three quarters of a 9 s
  // budget) and the names after it (the last quarter) both ran out, and
  // nothing was kept.
  const auto start = std::chrono::steady_clock::now();
  Stacks names = RunGdb(pid, false, deadline_seconds * 0.5, max_bytes);
  if (!names.started) return names;
  const double left =
      deadline_seconds -
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (left < 1) return names;
  Stacks full = RunGdb(pid, true, left, max_bytes);
  if (full.ok) return full;
  if (!names.ok) names.why += "; with debug information: " + full.why;
  return names;
}

}  // namespace fmstack::runtime
