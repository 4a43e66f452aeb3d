// runtime: the control channel between the supervisor and one worker: a
// socketpair whose worker end is fd FMSTACK_CONTROL_FD. Each message is one
// line of JSON. Workers send heartbeats ({"ev":"hb","step":S,"phase":P}),
// fault reports, failed collectives ({"ev":"collective-failed"}) and
// results; the supervisor sends commands ({"cmd":"stop"},
// {"cmd":"inject","kind":K}). Any program can speak it: examples/fmstack_client.py
// is the whole client in a dozen lines.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fmstack::runtime {

// The environment variable naming the worker's end.
inline constexpr const char* kControlFdEnv = "FMSTACK_CONTROL_FD";
// Longest message accepted; a longer line is a protocol error, not a buffer to grow.
inline constexpr size_t kMaxControlLine = 64 * 1024;

// Splits a byte stream into bounded lines.
class LineReader {
 public:
  // Appends bytes; returns the complete lines. Throws Error when a line
  // exceeds kMaxControlLine.
  std::vector<std::string> Feed(const char* data, size_t n);

 private:
  std::string pending_;
};

// Writes one JSON line; false when the peer is gone (never raises SIGPIPE).
bool SendLine(int fd, const nlohmann::json& message);

// Parses one line; nullopt (not an exception) when it is not a JSON object.
std::optional<nlohmann::json> ParseLine(const std::string& line);

}  // namespace fmstack::runtime
