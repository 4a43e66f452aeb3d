#include "runtime/control_tcp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "comm/store_wire.h"
#include "runtime/control.h"
#include "util/error.h"

namespace fmstack::runtime {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMaxHello = 1024;

std::string Hex(const std::string& bytes) {
  std::string out;
  for (const unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

// nullopt-like: "" when `hex` is not exactly `bytes` bytes of hex.
std::string Unhex(const std::string& hex, size_t bytes) {
  if (hex.size() != 2 * bytes) return "";
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    unsigned v = 0;
    for (size_t k = i; k < i + 2; ++k) {
      const char c = hex[k];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<unsigned>(c - 'a' + 10);
      } else {
        return "";
      }
    }
    out += static_cast<char>(v);
  }
  return out;
}

std::string Bound(int slot, int64_t generation) {
  return fmt::format("|{}|{}", slot, generation);
}

sockaddr_in ParseAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (colon == std::string::npos) throw Error(fmt::format("'{}' is not HOST:PORT", address));
  const std::string host = address.substr(0, colon);
  char* end = nullptr;
  const long port = std::strtol(address.c_str() + colon + 1, &end, 10);
  if (end == address.c_str() + colon + 1 || *end != '\0' || port <= 0 || port > 65535 ||
      ::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1)
    throw Error(fmt::format("'{}' is not an IPv4 HOST:PORT", address));
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

int MillisLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

// Reads one handshake line, a byte at a time (nothing after it is taken
// from the socket), before `deadline`.
std::string ReadLine(int fd, Clock::time_point deadline, const std::string& what) {
  std::string line;
  char c;
  while (line.size() < kMaxHello) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, MillisLeft(deadline)) <= 0)
      throw Error(fmt::format("{}: no answer before the deadline", what));
    const ssize_t n = ::read(fd, &c, 1);
    if (n == 0) throw Error(fmt::format("{}: the supervisor closed the connection", what));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw Error(fmt::format("{}: {}", what, std::strerror(errno)));
    }
    if (c == '\n') return line;
    line += c;
  }
  throw Error(fmt::format("{}: a handshake line longer than {} bytes", what, kMaxHello));
}

void KeepAliveOptions(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // A peer that vanished (its host lost power) fails writes within 10 s
  // instead of TCP's default quarter of an hour.
  const unsigned timeout_ms = 10000;
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout_ms, sizeof timeout_ms);
}

}  // namespace

int DialControl(const std::string& address, const std::string& secret, int slot, int64_t generation,
                std::chrono::milliseconds deadline_in) {
  const sockaddr_in a = ParseAddress(address);
  const std::string what = fmt::format("control channel to the supervisor at {}", address);
  const auto deadline = Clock::now() + deadline_in;
  std::string last_error = "no attempt";
  for (;;) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) throw Error(fmt::format("{}: socket: {}", what, std::strerror(errno)));
    int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, MillisLeft(deadline)) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      KeepAliveOptions(fd);
      try {
        const auto hello = ParseLine(ReadLine(fd, deadline, what));
        const std::string server_nonce =
            hello ? Unhex(hello->value("nonce", ""), kNonceBytes) : std::string();
        if (server_nonce.empty()) throw Error(what + ": the peer is not an fmstack supervisor");
        const std::string nonce = comm::wire::RandomBytes(kNonceBytes);
        const std::string mac =
            comm::wire::Mac(secret, "client", server_nonce, nonce + Bound(slot, generation));
        if (!SendLine(
                fd,
                {{"slot", slot}, {"gen", generation}, {"nonce", Hex(nonce)}, {"mac", Hex(mac)}}))
          throw Error(what + ": the supervisor closed the connection");
        const auto proof = ParseLine(ReadLine(fd, deadline, what));
        const std::string expect = comm::wire::Mac(secret, "server", nonce, server_nonce);
        if (!proof || !comm::wire::SameBytes(Unhex(proof->value("mac", ""), expect.size()), expect))
          throw Error(what + ": the supervisor did not prove it holds the run's secret");
        return fd;
      } catch (...) {
        ::close(fd);
        throw;
      }
    }
    last_error = std::strerror(errno);
    ::close(fd);
    if (Clock::now() >= deadline)
      throw Error(
          fmt::format("{}: {} (gave up after {} ms)", what, last_error, deadline_in.count()));
    ::poll(nullptr, 0, 100);  // refused: the supervisor may not listen yet
  }
}

ControlListener::ControlListener(const std::string& host, std::string secret)
    : secret_(std::move(secret)) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) throw Error(fmt::format("control listener: socket: {}", std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    ::close(fd_);
    throw Error(fmt::format("control listener: '{}' is not an IPv4 address", host));
  }
  socklen_t len = sizeof a;
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 256) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const std::string e = std::strerror(errno);
    ::close(fd_);
    throw Error(fmt::format("control listener on {}: {}", host, e));
  }
  address_ = fmt::format("{}:{}", host, ntohs(a.sin_port));
}

ControlListener::~ControlListener() {
  for (const Pending& p : pending_) ::close(p.fd);
  ::close(fd_);
}

std::vector<int> ControlListener::fds() const {
  std::vector<int> out{fd_};
  for (const Pending& p : pending_) out.push_back(p.fd);
  return out;
}

std::vector<ControlListener::Joined> ControlListener::Advance(std::vector<std::string>* refused) {
  for (;;) {
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    const int fd =
        ::accept4(fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) break;
    KeepAliveOptions(fd);
    char ip[INET_ADDRSTRLEN] = "?";
    ::inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
    Pending p{fd, comm::wire::RandomBytes(kNonceBytes),
              fmt::format("{}:{}", ip, ntohs(peer.sin_port)), "",
              Clock::now() + std::chrono::milliseconds(static_cast<int>(kHandshakeSeconds * 1e3))};
    if (!SendLine(fd, {{"nonce", Hex(p.nonce)}})) {
      ::close(fd);
      continue;
    }
    pending_.push_back(std::move(p));
  }
  std::vector<Joined> joined;
  const auto now = Clock::now();
  for (Pending& p : pending_) {
    char buf[512];
    ssize_t n;
    while ((n = ::read(p.fd, buf, sizeof buf)) > 0) p.buffer.append(buf, static_cast<size_t>(n));
    const bool closed = n == 0;
    const size_t nl = p.buffer.find('\n');
    std::string why;
    if (nl == std::string::npos) {
      if (closed)
        why = "closed the connection during the handshake";
      else if (p.buffer.size() > kMaxHello)
        why = "sent a hello longer than 1 KiB";
      else if (now >= p.deadline)
        why = fmt::format("sent no hello within {:.0f} s", kHandshakeSeconds);
      if (why.empty()) continue;
    } else {
      const auto hello = ParseLine(p.buffer.substr(0, nl));
      const std::string nonce = hello ? Unhex(hello->value("nonce", ""), kNonceBytes) : "";
      const bool typed = hello && (*hello)["slot"].is_number_integer() &&
                         (*hello)["gen"].is_number_integer() && !nonce.empty();
      const int slot = typed ? (*hello)["slot"].get<int>() : -1;
      const int64_t gen = typed ? (*hello)["gen"].get<int64_t>() : 0;
      const std::string expect =
          comm::wire::Mac(secret_, "client", p.nonce, nonce + Bound(slot, gen));
      if (!typed) {
        why = "sent a malformed hello";
      } else if (nl + 1 != p.buffer.size()) {
        why = "sent data before the handshake completed";
      } else if (!comm::wire::SameBytes(Unhex(hello->value("mac", ""), expect.size()), expect)) {
        why = "failed the handshake (wrong secret)";
      } else {
        SendLine(p.fd, {{"mac", Hex(comm::wire::Mac(secret_, "server", nonce, p.nonce))}});
        // From here the supervisor's reads and writes poll; writes wait at
        // most SendLine's second.
        joined.push_back({slot, gen, p.fd});
        p.fd = -1;
        continue;
      }
    }
    refused->push_back(fmt::format("control connection from {} refused: it {}", p.peer, why));
    ::close(p.fd);
    p.fd = -1;
  }
  std::erase_if(pending_, [](const Pending& p) { return p.fd < 0; });
  return joined;
}

}  // namespace fmstack::runtime
