#include "runtime/control.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>

#include "util/error.h"

namespace fmstack::runtime {

std::vector<std::string> LineReader::Feed(const char* data, size_t n) {
  pending_.append(data, n);
  std::vector<std::string> lines;
  size_t start = 0, nl;
  while ((nl = pending_.find('\n', start)) != std::string::npos) {
    lines.push_back(pending_.substr(start, nl - start));
    start = nl + 1;
  }
  pending_.erase(0, start);
  if (pending_.size() > kMaxControlLine) {
    throw Error(fmt::format("control channel: a message longer than {} bytes", kMaxControlLine));
  }
  return lines;
}

bool SendLine(int fd, const nlohmann::json& message) {
  const std::string line = message.dump() + "\n";
  size_t done = 0;
  // A full socket buffer means the peer stopped reading: give it a second,
  // not forever.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (done < line.size()) {
    const ssize_t n =
        ::send(fd, line.data() + done, line.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
        std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 50);
      continue;
    }
    return false;
  }
  return true;
}

std::optional<nlohmann::json> ParseLine(const std::string& line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

}  // namespace fmstack::runtime
