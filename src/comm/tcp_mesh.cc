#include "comm/tcp_mesh.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "comm/store_wire.h"
#include "util/error.h"

namespace fmstack::comm {

constexpr int kYieldsBeforePoll = 10;
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kGreeting[] = "FMMESH01";
constexpr size_t kGreetingBytes = sizeof kGreeting - 1;
constexpr size_t kKeyBytes = 32;

int LeftMs(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX));
}

// Blocks in poll() until `fd` is ready for `events`; false at the deadline.
bool WaitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, LeftMs(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;  // the next call reports the error
  }
}

void WriteExact(int fd, const std::string& bytes, Clock::time_point deadline,
                const std::string& what) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitFor(fd, POLLOUT, deadline)) throw Error(what + ": timed out sending");
    } else {
      throw Error(fmt::format("{}: {}", what, std::strerror(errno)));
    }
  }
}

std::string ReadExact(int fd, size_t bytes, Clock::time_point deadline, const std::string& what) {
  std::string out(bytes, '\0');
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::recv(fd, out.data() + done, bytes - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitFor(fd, POLLIN, deadline)) throw Error(what + ": no answer before the deadline");
    } else {
      throw Error(fmt::format("{}: connection closed ({})", what,
                              n == 0 ? "end of stream" : std::strerror(errno)));
    }
  }
  return out;
}

std::string Hex(const std::string& bytes) {
  std::string out;
  for (const unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

std::string Unhex(const std::string& hex, const std::string& what) {
  if (hex.size() != 2 * kKeyBytes) throw Error(what + ": malformed key");
  std::string out(kKeyBytes, '\0');
  for (size_t i = 0; i < kKeyBytes; ++i) {
    unsigned v = 0;
    if (std::sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) throw Error(what + ": malformed key");
    out[i] = static_cast<char>(v);
  }
  return out;
}

std::string RankBytes(int rank) {
  std::string s(4, '\0');
  const auto u = static_cast<uint32_t>(rank);
  std::memcpy(s.data(), &u, 4);
  return s;
}

// A socket address for `host` (a name or a literal) and `port`.
addrinfo* Resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw Error(fmt::format("cannot resolve '{}': {}", host, ::gai_strerror(rc)));
  }
  return res;
}

// The kernel's boot id: ranks in different network namespaces of one
// machine share it, ranks on different machines do not.
std::string BootId() {
  std::string id;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {};
    if (std::fscanf(f, "%63s", buf) == 1) id = buf;
    std::fclose(f);
  }
  return id.empty() ? "unknown" : id;
}

void SetNonBlocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int Dial(const std::string& host, uint16_t port, Clock::time_point deadline,
         const std::string& what) {
  addrinfo* res = Resolve(host, port, false);
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::freeaddrinfo(res);
    throw Error(fmt::format("{}: socket: {}", what, std::strerror(errno)));
  }
  SetNonBlocking(fd);
  const int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  int err = rc == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    if (!WaitFor(fd, POLLOUT, deadline)) {
      ::close(fd);
      throw Error(what + ": connect timed out");
    }
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  }
  if (err != 0) {
    ::close(fd);
    throw Error(fmt::format("{}: connect: {}", what, std::strerror(err)));
  }
  return fd;
}

}  // namespace

TcpMesh::TcpMesh(TcpStore& store, TcpMeshOptions options)
    : o_(std::move(options)),
      fds_(static_cast<size_t>(o_.size), -1),
      sent_(fds_.size(), 0),
      received_(fds_.size(), 0) {
  try {
    Connect(store);
  } catch (...) {
    for (const int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
    throw;
  }
  // Spinning only pays when the peer being waited for has a core to run
  // on; with more ranks of this mesh on this machine than cores (nodes in
  // network namespaces of one host), every wait sleeps at once.
  crowded_ = colocated_ > static_cast<int>(std::thread::hardware_concurrency());
  if (!o_.busy_poll && crowded_) o_.spin = std::chrono::microseconds(0);
  const int one = 1;
  for (const int fd : fds_) {
    if (fd < 0) continue;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    SetNonBlocking(fd);
  }
}

TcpMesh::~TcpMesh() {
  for (const int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

int TcpMesh::JobRank(int group_rank) const {
  return o_.job_ranks.empty() ? group_rank : o_.job_ranks[static_cast<size_t>(group_rank)];
}

// Every rank listens, publishes "host port key", dials every lower rank and
// accepts every higher one. Lower ranks never wait on higher ones while they
// dial, so the order cannot deadlock.
void TcpMesh::Connect(TcpStore& store) {
  const auto deadline = Clock::now() + o_.timeout;
  const std::string me = fmt::format("tcp mesh '{}' rank {}", o_.prefix, JobRank(o_.rank));
  addrinfo* res = Resolve(o_.hostname, 0, true);
  const int listener = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool bound = listener >= 0 && ::bind(listener, res->ai_addr, res->ai_addrlen) == 0 &&
                     ::listen(listener, o_.size) == 0;
  ::freeaddrinfo(res);
  if (!bound) {
    const std::string why = std::strerror(errno);
    if (listener >= 0) ::close(listener);
    throw Error(fmt::format("{}: cannot listen on {}: {}", me, o_.hostname, why));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } const close_listener{listener};
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  const uint16_t port =
      ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                       : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  const std::string key = wire::RandomBytes(kKeyBytes);
  const std::string boot = BootId();
  store.Set(fmt::format("{}/addr/{}", o_.prefix, o_.rank),
            fmt::format("{} {} {} {}", o_.hostname, port, Hex(key), boot));
  // Every peer's "host port key boot-id", read once against the deadline.
  std::vector<std::string> addresses(static_cast<size_t>(o_.size));
  for (int peer = 0; peer < o_.size; ++peer) {
    if (peer == o_.rank) continue;
    const std::string& value = addresses[peer] =
        store.Get(fmt::format("{}/addr/{}", o_.prefix, peer),
                  std::chrono::milliseconds(std::max(1, LeftMs(deadline))));
    if (value.size() >= boot.size() &&
        value.compare(value.size() - boot.size(), boot.size(), boot) == 0)
      ++colocated_;
  }

  for (int peer = 0; peer < o_.rank; ++peer) {
    const std::string what = fmt::format("{}: to rank {}", me, JobRank(peer));
    const std::string& value = addresses[peer];
    char host[256] = {};
    unsigned peer_port = 0;
    char hex[2 * kKeyBytes + 1] = {};
    if (std::sscanf(value.c_str(), "%255s %u %64s", host, &peer_port, hex) != 3 || peer_port == 0 ||
        peer_port > 65535) {
      throw Error(fmt::format("{}: malformed address '{}' in the store", what, value));
    }
    const std::string peer_key = Unhex(hex, what);
    fds_[peer] = Dial(host, static_cast<uint16_t>(peer_port), deadline, what);
    const std::string hello =
        ReadExact(fds_[peer], kGreetingBytes + wire::kNonceBytes, deadline, what + " (greeting)");
    if (hello.compare(0, kGreetingBytes, kGreeting) != 0)
      throw Error(what + ": the listener is not an fmstack mesh (bad greeting)");
    const std::string server_nonce = hello.substr(kGreetingBytes);
    const std::string nonce = wire::RandomBytes(wire::kNonceBytes);
    const std::string rank = RankBytes(o_.rank);
    WriteExact(fds_[peer], rank + nonce + wire::Mac(peer_key, "client", server_nonce, nonce + rank),
               deadline, what);
    const std::string proof = ReadExact(fds_[peer], wire::kMacBytes, deadline, what + " (proof)");
    if (!wire::SameBytes(proof, wire::Mac(peer_key, "server", nonce, server_nonce)))
      throw Error(what + ": the listener did not prove it holds the key it published");
  }

  int refused = 0;
  std::string last_refusal;
  for (int waiting = o_.size - 1 - o_.rank; waiting > 0;) {
    if (!WaitFor(listener, POLLIN, deadline)) {
      std::string missing;
      for (int p = o_.rank + 1; p < o_.size; ++p) {
        if (fds_[p] < 0) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", JobRank(p));
      }
      throw Error(
          fmt::format("{}: ranks {} did not connect within {} ms ({} connection(s) "
                      "refused{}{})",
                      me, missing, o_.timeout.count(), refused, last_refusal.empty() ? "" : ": ",
                      last_refusal));
    }
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    try {
      // A stray connection gets a few seconds, not the whole deadline.
      const auto hs_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(5));
      const std::string nonce = wire::RandomBytes(wire::kNonceBytes);
      WriteExact(fd, kGreeting + nonce, hs_deadline, me + ": greeting");
      const std::string hello =
          ReadExact(fd, 4 + wire::kNonceBytes + wire::kMacBytes, hs_deadline, me + ": hello");
      uint32_t peer = 0;
      std::memcpy(&peer, hello.data(), 4);
      const std::string client_nonce = hello.substr(4, wire::kNonceBytes);
      if (peer <= static_cast<uint32_t>(o_.rank) || peer >= static_cast<uint32_t>(o_.size) ||
          fds_[peer] >= 0) {
        throw Error(fmt::format("a peer claimed rank {}, not one this rank accepts", peer));
      }
      const std::string mac = hello.substr(4 + wire::kNonceBytes);
      if (!wire::SameBytes(mac, wire::Mac(key, "client", nonce, client_nonce + hello.substr(0, 4))))
        throw Error(fmt::format("a peer claiming rank {} failed the handshake", peer));
      WriteExact(fd, wire::Mac(key, "server", client_nonce, nonce), hs_deadline, me + ": proof");
      fds_[peer] = fd;
      --waiting;
    } catch (const std::exception& e) {
      ::close(fd);
      ++refused;
      last_refusal = e.what();
    }
  }
}

void TcpMesh::Shutdown() {
  shut_ = true;
  for (const int fd : fds_) {
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
  }
}

void TcpMesh::Lost(const Transfer& t, const char* op, const std::string& why) const {
  throw Error(fmt::format("{} on rank {}: {} rank {} ({} of {} bytes moved): {}", op,
                          JobRank(o_.rank),
                          t.kind == Transfer::kSend ? "sending to" : "receiving from",
                          JobRank(t.peer), t.done, t.bytes, why));
}

// One non-blocking step of `t`; true when bytes moved.
bool TcpMesh::Advance(Transfer& t, const char* op) {
  const auto peer = static_cast<size_t>(t.peer);
  const int fd = fds_[peer];
  uint64_t& stream = t.kind == Transfer::kSend ? sent_[peer] : received_[peer];
  if (t.header_bytes == 0) {  // this message's frame starts here
    t.header_bytes = FrameHeaderBytes(stream);
    const uint64_t length = t.bytes;
    if (t.kind == Transfer::kSend) std::memcpy(t.header, &length, sizeof length);
  }
  iovec iov[2];
  int n_iov = 0;
  if (t.header_done < t.header_bytes) {
    iov[n_iov++] = {t.header + t.header_done, t.header_bytes - t.header_done};
  }
  if (t.done < t.bytes) iov[n_iov++] = {t.data + t.done, t.bytes - t.done};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<size_t>(n_iov);
  const ssize_t n = t.kind == Transfer::kSend ? ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT)
                                              : ::recvmsg(fd, &msg, MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    Lost(t, op, shut_ ? "the communicator was shut down" : std::strerror(errno));
  }
  if (n == 0) {
    Lost(t, op, shut_ ? "the communicator was shut down" : "the connection was closed");
  }
  auto moved = static_cast<size_t>(n);
  stream += moved;
  const size_t to_header = std::min(moved, t.header_bytes - t.header_done);
  t.header_done += to_header;
  moved -= to_header;
  t.done += moved;
  if (t.kind == Transfer::kRecv && to_header > 0 && t.header_done == t.header_bytes) {
    uint64_t length = 0;
    std::memcpy(&length, t.header, sizeof length);
    if (length != t.bytes) {
      Lost(t, op,
           fmt::format("the peer sent {} bytes where this rank expected {} (the ranks called "
                       "{} with different sizes)",
                       length, t.bytes, op));
    }
  }
  if (t.on_data != nullptr && t.done > t.notified) {
    const size_t ready = t.done == t.bytes ? t.bytes : t.done / t.align * t.align;
    const bool due =
        ready == t.bytes || (t.notify_bytes > 0 && ready - t.notified >= t.notify_bytes);
    if (due && ready > t.notified) {
      t.on_data(t.ctx, t.notified, ready);
      t.notified = ready;
    }
  }
  return true;
}

// The earliest unfinished transfer of a Run is the one this rank waits on:
// it heads its lane, and what it waits for has finished.
const Transfer& TcpMesh::Waited(std::span<const Transfer> transfers) const {
  return transfers[static_cast<size_t>(*std::min_element(heads_.begin(), heads_.end()))];
}

// Lanes: the transfers of one peer and direction, in list order, since a
// socket carries one message after another. Each lane's head moves; a
// head whose `after` has not finished waits, and so does the rest of its
// lane.
void TcpMesh::Run(std::span<Transfer> transfers, const char* op) {
  const auto deadline = Clock::now() + o_.timeout;
  const auto finished = [](const Transfer& t) {
    return t.header_bytes > 0 && t.header_done == t.header_bytes && t.done == t.bytes;
  };
  lane_tail_.assign(2 * static_cast<size_t>(o_.size), -1);
  next_.assign(transfers.size(), -1);
  heads_.clear();
  for (size_t i = 0; i < transfers.size(); ++i) {
    Transfer& t = transfers[i];
    t.header_bytes = t.header_done = t.done = t.notified = 0;
    if (t.peer < 0 || t.peer >= o_.size || t.peer == o_.rank) {
      throw Error(fmt::format("{} on rank {}: peer {} outside the group of {} (or this rank)", op,
                              JobRank(o_.rank), t.peer, o_.size));
    }
    if (t.after >= static_cast<int64_t>(i)) {
      throw Error(
          fmt::format("{} on rank {}: transfer {} waits for transfer {}, not an earlier one", op,
                      JobRank(o_.rank), i, t.after));
    }
    int64_t& tail = lane_tail_[2 * static_cast<size_t>(t.peer) + t.kind];
    if (tail < 0) {
      heads_.push_back(static_cast<int64_t>(i));
    } else {
      next_[static_cast<size_t>(tail)] = static_cast<int64_t>(i);
    }
    tail = static_cast<int64_t>(i);
  }
  const auto blocked = [&](const Transfer& t) {
    return t.after >= 0 && !finished(transfers[static_cast<size_t>(t.after)]);
  };
  auto spin_until = Clock::now() + o_.spin;
  int yields = 0;
  for (;;) {
    bool moved = false;
    for (size_t h = 0; h < heads_.size();) {
      Transfer& t = transfers[static_cast<size_t>(heads_[h])];
      if (!blocked(t)) moved |= Advance(t, op);
      if (!finished(t)) {
        ++h;
        continue;
      }
      heads_[h] = next_[static_cast<size_t>(heads_[h])];
      if (heads_[h] < 0) {
        heads_[h] = heads_.back();
        heads_.pop_back();
      }
    }
    if (heads_.empty()) return;
    if (shut_) Lost(Waited(transfers), op, "the communicator was shut down");
    const auto now = Clock::now();
    if (moved) {
      spin_until = now + o_.spin;
      yields = 0;
      continue;
    }
    if (now >= deadline) {
      Lost(Waited(transfers), op, fmt::format("timed out after {} ms", o_.timeout.count()));
    }
    if (o_.busy_poll || now < spin_until) continue;
    // Then give the core away a few times before sleeping: where ranks
    // outnumber cores the peer being waited for often runs on this core,
    // and a yield lets it run now instead of after a wake-up.
    if (yields < kYieldsBeforePoll) {
      ++yields;
      sched_yield();
      continue;
    }
    waits_.clear();
    for (const int64_t i : heads_) {
      const Transfer& t = transfers[static_cast<size_t>(i)];
      if (blocked(t)) continue;
      waits_.push_back({fds_[static_cast<size_t>(t.peer)],
                        static_cast<short>(t.kind == Transfer::kSend ? POLLOUT : POLLIN), 0});
    }
    // Never empty: Waited() is not blocked.
    ::poll(waits_.data(), waits_.size(), LeftMs(deadline));
  }
}

}  // namespace fmstack::comm
