#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "comm/store_wire.h"
#include "util/error.h"

namespace fmstack::comm {
namespace {

using namespace wire;  // NOLINT: the wire format is this file's vocabulary

std::string Errno(const char* what) {
  return fmt::format("{}: {}", what, std::strerror(errno));
}

void SendAll(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(Errno("store: send"));
    off += static_cast<size_t>(n);
  }
}

}  // namespace

std::string NewStoreSecret() {
  const std::string raw = RandomBytes(32);
  std::string hex;
  for (unsigned char c : raw) hex += fmt::format("{:02x}", c);
  return hex;
}

// ---------------------------------------------------------------- client ---

TcpStore::TcpStore(const std::string& host, uint16_t port, const std::string& secret,
                   std::chrono::milliseconds connect_timeout)
    : address_(fmt::format("{}:{}", host, port)) {
  if (secret.empty()) {
    throw Error(
        fmt::format("store {}: no secret to authenticate with (FMSTACK_STORE_SECRET is "
                    "set by `fmstack run` for its workers)",
                    address_));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    throw Error(fmt::format("store: MASTER_ADDR '{}' is not an IPv4 address", host));
  }
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + connect_timeout;
  // The handshake gets at least 10 s: a store flooded by connections
  // without the secret drops some of ours before reading them, and each
  // such drop is tried again.
  const auto handshake_deadline =
      std::max(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  int dropped = 0;
  for (;;) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      const std::string e = Errno("connect");
      ::close(fd_);
      fd_ = -1;
      if (std::chrono::steady_clock::now() > deadline) {
        throw Error(fmt::format("store: cannot reach the rendezvous store at {} within {} ms ({})",
                                address_, connect_timeout.count(), e));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    try {
      Handshake(secret, handshake_deadline);
      return;
    } catch (const Dropped& e) {
      ::close(fd_);
      fd_ = -1;
      ++dropped;
      if (std::chrono::steady_clock::now() >= handshake_deadline) {
        throw Error(fmt::format(
            "store {}: {} connection(s) closed before the store read this process's proof "
            "within {} ms (last: {}): the store keeps few connections waiting for a "
            "handshake, and a flood of connections without the run's secret may be taking them",
            address_, dropped,
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                  start)
                .count(),
            e.what()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10 + 10 * std::min(dropped, 10)));
    } catch (...) {
      ::close(fd_);
      fd_ = -1;
      throw;
    }
  }
}

std::string TcpStore::ReadFrame(std::chrono::steady_clock::time_point deadline) {
  std::string in, frame;
  size_t pos = 0;
  char buf[4096];
  while (!TakeField(in, pos, frame)) {
    pos = 0;
    if (PeekLength(in) > (1u << 20))
      throw Error(fmt::format("store {}: oversized handshake", address_));
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (r == 0) throw Dropped("no answer before the deadline");
    const ssize_t n = r > 0 ? ::recv(fd_, buf, sizeof buf, 0) : -1;
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Dropped("closed by the store without an answer");
    in.append(buf, static_cast<size_t>(n));
  }
  return frame;
}

void TcpStore::Handshake(const std::string& secret,
                         std::chrono::steady_clock::time_point deadline) {
  const std::string nonce = RandomBytes(kNonceBytes);
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const std::string time = fmt::format("{:016x}", now_ms);
  try {
    SendAll(fd_, Frame(kHello + nonce + time + Mac(secret, "client", nonce, time)));
  } catch (const Error& e) {
    throw Dropped(e.what());
  }
  const std::string answer = ReadFrame(deadline);
  if (answer.starts_with(kRefused)) {
    throw Error(fmt::format("store {} refused this process: {}", address_,
                            answer.substr(sizeof kRefused - 1, 512)));
  }
  if (!answer.starts_with(kAdmitted) ||
      !SameBytes(answer.substr(sizeof kAdmitted - 1), Mac(secret, "server", nonce, time))) {
    throw Error(fmt::format(
        "store {}: the server did not prove it holds the run's secret (not this run's store?)",
        address_));
  }
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TcpStore::Request(const std::string& payload, std::chrono::milliseconds timeout,
                              bool* timed_out) {
  std::lock_guard lock(mu_);
  if (fd_ < 0) throw Error(fmt::format("store {}: connection lost earlier", address_));
  SendAll(fd_, Frame(payload));
  std::string in;
  size_t pos = 0;
  std::string reply;
  // The server answers by the request's own deadline; allow it a margin.
  const auto deadline = std::chrono::steady_clock::now() + timeout + std::chrono::seconds(5);
  char buf[64 * 1024];
  while (!TakeField(in, pos, reply)) {
    pos = 0;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (r == 0) throw Error(fmt::format("store {}: no reply", address_));
    const ssize_t n = r > 0 ? ::recv(fd_, buf, sizeof buf, 0) : -1;
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd_);
      fd_ = -1;
      throw Error(fmt::format("store {}: connection closed by the supervisor", address_));
    }
    in.append(buf, static_cast<size_t>(n));
  }
  if (reply.empty()) throw Error(fmt::format("store {}: empty reply", address_));
  *timed_out = reply[0] == static_cast<char>(kTimeout);
  size_t fpos = 1;
  std::string field;
  TakeField(reply, fpos, field);
  if (reply[0] == static_cast<char>(kError))
    throw Error(fmt::format("store {}: {}", address_, field));
  return field;
}

void TcpStore::Set(const std::string& key, const std::string& value) {
  std::string p(1, static_cast<char>(kSet));
  PutField(p, key);
  PutField(p, value);
  bool timed_out = false;
  Request(p, timeout_, &timed_out);
}

std::optional<std::string> TcpStore::TryGet(const std::string& key,
                                            std::chrono::milliseconds timeout) {
  std::string p(1, static_cast<char>(kGet));
  PutField(p, key);
  PutField(p, std::to_string(timeout.count()));
  bool timed_out = false;
  std::string v = Request(p, timeout, &timed_out);
  if (timed_out) return std::nullopt;
  return v;
}

std::string TcpStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  auto v = TryGet(key, timeout);
  if (!v) {
    throw Error(fmt::format("store {}: key '{}' did not appear within {} ms", address_, key,
                            timeout.count()));
  }
  return *v;
}

int64_t TcpStore::Add(const std::string& key, int64_t delta) {
  std::string p(1, static_cast<char>(kAdd));
  PutField(p, key);
  PutField(p, std::to_string(delta));
  bool timed_out = false;
  return std::stoll(Request(p, timeout_, &timed_out));
}

void TcpStore::set(const std::string& key, const std::vector<char>& data) {
  Set(key, std::string(data.begin(), data.end()));
}

std::vector<char> TcpStore::get(const std::string& key) {
  const std::string v = Get(key, timeout_);
  return {v.begin(), v.end()};
}

void TcpStore::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
}

void TcpStore::wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) {
  std::string p(1, static_cast<char>(kWait));
  for (const auto& k : keys) PutField(p, k);
  PutField(p, std::to_string(timeout.count()));
  bool timed_out = false;
  Request(p, timeout, &timed_out);
  if (timed_out) {
    throw Error(fmt::format("store {}: keys ({}) did not all appear within {} ms", address_,
                            fmt::join(keys, ", "), timeout.count()));
  }
}

std::pair<int, std::string> ReportedFailure(TcpStore& store, int64_t generation,
                                            std::chrono::milliseconds wait) {
  std::optional<std::string> v;
  try {
    v = store.TryGet(FailureKey(generation), wait);
  } catch (const std::exception&) {
    return {-1, "the supervisor's store is unreachable too"};
  }
  if (!v) return {-1, ""};
  const size_t sp = v->find(' ');
  try {
    return {std::stoi(v->substr(0, sp)), sp == std::string::npos ? "" : v->substr(sp + 1)};
  } catch (const std::exception&) {
    return {-1, *v};
  }
}

CommError CollectiveFailure(TcpStore& store, int64_t generation, const char* op, int job_rank,
                            const std::string& group, const std::string& transport,
                            const std::string& transport_error) {
  const auto [failed, why] = ReportedFailure(store, generation, std::chrono::milliseconds(1500));
  const std::string who = failed >= 0 ? fmt::format("rank {} failed ({})", failed, why)
                                      : "a peer was lost or timed out, and no rank was "
                                        "reported dead";
  return CommError(fmt::format("{} on rank {} (group '{}', generation {}): {}; {}: {}", op,
                               job_rank, group, generation, who, transport, transport_error),
                   failed);
}

}  // namespace fmstack::comm
