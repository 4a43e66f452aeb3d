// The store's server: one thread, one poll loop, non-blocking sockets. A
// connection must authenticate before anything else; what it sends and what
// waits to be sent to it are bounded, so a client that floods, stalls or
// never reads costs the others nothing, and connections without the secret
// are bounded in number and time (tcp_store.h), their drops noted in one
// line every 10 s at most.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

#include "comm/store_wire.h"
#include "comm/tcp_store.h"
#include "util/error.h"

namespace fmstack::comm {

using namespace wire;  // NOLINT: the wire format is this file's vocabulary
using Clock = std::chrono::steady_clock;

struct TcpStoreServer::State {
  struct Conn {
    std::string in, out;
    std::string peer;  // "ip:port", for the log
    bool authed = false;
    bool closing = false;
    Clock::time_point since;
    uint64_t seq = 0;  // order of arrival, for evicting the oldest unauthenticated
  };
  struct Waiter {
    int fd;
    Op op;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };
  std::string secret;
  Log log;
  StoreLimits limits;
  std::mutex mu;
  std::map<std::string, std::string> data;
  size_t total = 0;  // bytes of keys and values held
  std::map<int, Conn> conns;
  std::vector<Waiter> waiters;
  bool stop = false;
  std::set<std::pair<uint64_t, int>> waiting;  // (seq, fd) of connections without a proof
  size_t authed = 0;
  uint64_t next_seq = 0;
  std::map<std::string, int64_t> seen_nonces;  // of admitted handshakes -> their time (ms)
  // Connections without the secret dropped since the last note, and why.
  std::map<std::string, int64_t> drops;
  std::string last_dropped;
  Clock::time_point next_drop_note;

  void Note(const std::string& line) const {
    if (log) log(line);
  }
  // A connection without the secret is dropped: counted, noted in bulk.
  void Dropped(const Conn& c, const std::string& why) {
    ++drops[why];
    last_dropped = c.peer;
    NoteDrops(false);
  }
  void NoteDrops(bool now) {
    if (drops.empty() || (!now && Clock::now() < next_drop_note)) return;
    std::string what;
    for (const auto& [why, n] : drops)
      what += fmt::format("{}{} {}", what.empty() ? "" : ", ", n, why);
    Note(fmt::format(
        "store: dropped connections without the run's secret: {} (the last from {}; "
        "at most {} wait for a handshake, {} ms each)",
        what, last_dropped, limits.max_unauthenticated, limits.handshake_timeout.count()));
    drops.clear();
    next_drop_note = Clock::now() + std::chrono::seconds(10);
  }
  // Largest frame a client may send: a SET of the biggest key and value.
  size_t MaxFrame() const { return limits.max_key_bytes + limits.max_value_bytes + 64; }

  void Send(int fd, const std::string& framed) {
    Conn& c = conns[fd];
    c.out += framed;
    Flush(fd);
    // A client that does not read its replies is not allowed to make the
    // server hold them without bound.
    if (c.out.size() > 2 * limits.max_value_bytes + (1 << 20) && !c.closing) {
      Note(fmt::format("store: dropped {}: it stopped reading its replies ({} bytes queued)",
                       c.peer, c.out.size()));
      c.closing = true;
    }
  }
  void Flush(int fd) {
    Conn& c = conns[fd];
    while (!c.out.empty()) {
      const ssize_t n = ::send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      c.closing = true;  // the client went away
      return;
    }
  }
  void Reply(int fd, Status s, const std::string& field) {
    std::string payload(1, static_cast<char>(s));
    PutField(payload, field);
    Send(fd, Frame(payload));
  }
  void Answer(const Waiter& w) { Reply(w.fd, kOk, w.op == kGet ? data[w.keys[0]] : std::string()); }
  bool Has(const std::vector<std::string>& keys) const {
    for (const auto& k : keys) {
      if (!data.contains(k)) return false;
    }
    return true;
  }
  // Answers every waiter whose keys now exist or whose deadline passed.
  void Settle() {
    const auto now = Clock::now();
    std::erase_if(waiters, [&](const Waiter& w) {
      if (Has(w.keys)) {
        Answer(w);
        return true;
      }
      if (now >= w.deadline) {
        Reply(w.fd, kTimeout, {});
        return true;
      }
      return false;
    });
  }
  // Stores key = value within the limits; the problem otherwise.
  std::optional<std::string> Put(const std::string& key, const std::string& value) {
    if (key.size() > limits.max_key_bytes)
      return fmt::format("key of {} bytes, the limit is {}", key.size(), limits.max_key_bytes);
    if (value.size() > limits.max_value_bytes) {
      return fmt::format("value of {} bytes for '{}', the limit is {}", value.size(), key,
                         limits.max_value_bytes);
    }
    const auto it = data.find(key);
    const size_t old = it == data.end() ? 0 : key.size() + it->second.size();
    if (total - old + key.size() + value.size() > limits.max_total_bytes) {
      return fmt::format("full: {} bytes held, the limit is {}", total, limits.max_total_bytes);
    }
    total = total - old + key.size() + value.size();
    data[key] = value;
    return std::nullopt;
  }
  void Refuse(int fd, const std::string& why) {
    Conn& c = conns[fd];
    Dropped(c, why.substr(0, why.find(':')));  // noted before the client can read why
    Send(fd, Frame(kRefused + why));
    c.closing = true;
  }
  void Authenticate(int fd, const std::string& msg) {
    Conn& c = conns[fd];
    constexpr size_t kPrefix = sizeof kHello - 1;
    if (msg.size() != kPrefix + kNonceBytes + kTimeChars + kMacBytes ||
        msg.compare(0, kPrefix, kHello) != 0)
      return Refuse(fd, "not an fmstack store handshake (another program, or another version)");
    const std::string nonce = msg.substr(kPrefix, kNonceBytes);
    const std::string time = msg.substr(kPrefix + kNonceBytes, kTimeChars);
    if (!SameBytes(msg.substr(kPrefix + kNonceBytes + kTimeChars),
                   Mac(secret, "client", nonce, time)))
      return Refuse(fd, "not this run's secret: FMSTACK_STORE_SECRET differs");
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    int64_t sent_ms = 0;
    try {
      sent_ms = static_cast<int64_t>(std::stoull(time, nullptr, 16));
    } catch (const std::exception&) {
      return Refuse(fd, "a handshake whose time is not a number");
    }
    constexpr int64_t kWindowMs = 5 * 60 * 1000;
    if (std::llabs(now_ms - sent_ms) > kWindowMs)
      return Refuse(fd, fmt::format("clock skew: the client's clock is {} s off this host's "
                                    "(5 minutes at most)",
                                    (sent_ms - now_ms) / 1000));
    std::erase_if(seen_nonces, [&](const auto& kv) { return kv.second < now_ms - 2 * kWindowMs; });
    if (!seen_nonces.emplace(nonce, now_ms).second)
      return Refuse(fd, "replayed: a handshake this store has admitted before");
    c.authed = true;
    waiting.erase({c.seq, fd});
    ++authed;
    Send(fd, Frame(kAdmitted + Mac(secret, "server", nonce, time)));
  }
  void Handle(int fd, const std::string& msg) {
    if (!conns[fd].authed) return Authenticate(fd, msg);
    if (msg.empty()) return Reply(fd, kError, "empty request");
    const auto op = static_cast<Op>(msg[0]);
    std::vector<std::string> fields;
    std::string f;
    size_t pos = 1;
    while (fields.size() < 1024 && TakeField(msg, pos, f)) fields.push_back(f);
    if (op == kSet && fields.size() == 2) {
      const std::optional<std::string> problem = Put(fields[0], fields[1]);
      return problem ? Reply(fd, kError, *problem) : Reply(fd, kOk, {});
    }
    if (op == kAdd && fields.size() == 2) {
      int64_t sum = 0;
      try {
        sum = (data.contains(fields[0]) ? std::stoll(data[fields[0]]) : 0) + std::stoll(fields[1]);
      } catch (const std::exception&) {
        return Reply(fd, kError, fmt::format("ADD on '{}': not an integer", fields[0]));
      }
      const std::optional<std::string> problem = Put(fields[0], std::to_string(sum));
      return problem ? Reply(fd, kError, *problem) : Reply(fd, kOk, data[fields[0]]);
    }
    if ((op == kGet || op == kWait) && fields.size() >= 2) {
      int64_t ms = 0;
      try {
        ms = std::stoll(fields.back());
      } catch (const std::exception&) {
        return Reply(fd, kError, "a wait without a timeout");
      }
      fields.pop_back();
      waiters.push_back(Waiter{fd, op, fields,
                               Clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(
                                                  ms, 0, int64_t{24} * 3600 * 1000))});
      return Settle();
    }
    Reply(fd, kError, fmt::format("unknown request (op {})", static_cast<int>(op)));
  }
  // Takes one waiting connection; false when none is left.
  bool Accept(int listen_fd, char* buf, size_t cap) {
    sockaddr_in from{};
    socklen_t len = sizeof from;
    const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&from), &len,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return false;
    char ip[INET_ADDRSTRLEN] = "?";
    ::inet_ntop(AF_INET, &from.sin_addr, ip, sizeof ip);
    const std::string peer = fmt::format("{}:{}", ip, ntohs(from.sin_port));
    if (authed >= limits.max_connections) {
      Note(fmt::format("store: refused {}: {} authenticated connections already", peer, authed));
      ::close(fd);
      return true;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Conn& c = conns[fd];
    c.peer = peer;
    c.since = Clock::now();
    c.seq = next_seq++;
    waiting.insert({c.seq, fd});
    // A rank sends its proof as it connects: it is usually here already.
    Read(fd, buf, cap);
    // Too many without a proof: the oldest goes (a rank's proof is read
    // at once, so the oldest waiting is the least likely to be one).
    while (waiting.size() > limits.max_unauthenticated) {
      const int old = waiting.begin()->second;
      waiting.erase(waiting.begin());
      Conn& o = conns[old];
      if (!o.closing) Dropped(o, "evicted by newer ones");
      o.closing = true;
    }
    return true;
  }
  void Read(int fd, char* buf, size_t cap) {
    Conn& c = conns[fd];
    const ssize_t n = ::recv(fd, buf, cap, 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
      c.closing = true;
      return;
    }
    if (n < 0) return;
    c.in.append(buf, static_cast<size_t>(n));
    size_t pos = 0;
    std::string msg;
    while (!c.closing && TakeField(c.in, pos, msg)) Handle(fd, msg);
    c.in.erase(0, pos);
    const size_t cap_frame =
        c.authed ? MaxFrame() : sizeof kHello - 1 + kNonceBytes + kTimeChars + kMacBytes;
    if (!c.closing && PeekLength(c.in) > cap_frame) {
      if (c.authed) {
        Note(fmt::format("store: dropped {}: a message of {} bytes, the limit is {}", c.peer,
                         PeekLength(c.in), cap_frame));
        Reply(fd, kError,
              fmt::format("a request of {} bytes, the limit is {}", PeekLength(c.in), cap_frame));
      }
      c.closing = true;
    }
  }
  // Drops closing connections (after one last try to send what is queued)
  // and handshakes that take too long.
  void Sweep() {
    const auto now = Clock::now();
    for (auto it = conns.begin(); it != conns.end();) {
      Conn& c = it->second;
      if (!c.authed && !c.closing && now - c.since > limits.handshake_timeout) {
        Dropped(c, "past the handshake deadline");
        c.closing = true;
      }
      if (!c.closing) {
        ++it;
        continue;
      }
      const int fd = it->first;
      std::erase_if(waiters, [fd](const Waiter& w) { return w.fd == fd; });
      if (c.authed) {
        --authed;
      } else {
        waiting.erase({c.seq, fd});
      }
      ::close(fd);
      it = conns.erase(it);
    }
  }
};

TcpStoreServer::TcpStoreServer(const std::string& host, uint16_t port, std::string secret, Log log,
                               StoreLimits limits)
    : state_(std::make_unique<State>()) {
  if (secret.empty()) throw Error("store: a server needs a secret");
  state_->secret = std::move(secret);
  state_->log = std::move(log);
  state_->limits = limits;
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) throw Error(fmt::format("store: socket: {}", std::strerror(errno)));
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    ::close(listen_fd_);
    throw Error(fmt::format("store: '{}' is not an IPv4 address", host));
  }
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 1024) != 0) {
    const std::string e = fmt::format("store: bind {}:{}: {}", host, port, std::strerror(errno));
    ::close(listen_fd_);
    throw Error(e);
  }
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  // OpenSSL initialises itself, and caches its digests, under global write
  // locks on first use. Do it here, before the serving thread exists: a
  // process that forks while that thread held such a lock would hand its
  // children a lock no thread will ever release (their first HMAC hangs).
  (void)Mac(state_->secret, "warm-up", "", "");
  thread_ = std::thread([this] { Serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  {
    std::lock_guard lock(state_->mu);
    state_->stop = true;
  }
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  thread_.join();
  for (const auto& [fd, conn] : state_->conns) ::close(fd);
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void TcpStoreServer::Set(const std::string& key, const std::string& value) {
  std::lock_guard lock(state_->mu);
  if (const std::optional<std::string> problem = state_->Put(key, value))
    throw Error("store: " + *problem);
  state_->Settle();
}

bool TcpStoreServer::Has(const std::string& key) const {
  std::lock_guard lock(state_->mu);
  return state_->data.contains(key);
}

void TcpStoreServer::Serve() {
  std::vector<pollfd> fds;
  std::vector<char> buf(256 * 1024);
  for (;;) {
    {
      std::lock_guard lock(state_->mu);
      if (state_->stop) return;
      fds.assign({{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}});
      for (const auto& [fd, conn] : state_->conns) {
        fds.push_back({fd, static_cast<short>(POLLIN | (conn.out.empty() ? 0 : POLLOUT)), 0});
      }
    }
    // Wake at least every 50 ms to expire waiters and handshakes.
    if (::poll(fds.data(), fds.size(), 50) < 0 && errno != EINTR) return;
    std::lock_guard lock(state_->mu);
    // At most 64 a round, so that the connections already in are read too.
    if (fds[0].revents & POLLIN) {
      for (int i = 0; i < 64 && state_->Accept(listen_fd_, buf.data(), buf.size()); ++i) {
      }
    }
    if (fds[1].revents & POLLIN) {
      uint64_t v;
      (void)!::read(wake_fd_, &v, sizeof v);
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int fd = fds[i].fd;
      if (fds[i].revents & POLLOUT) state_->Flush(fd);
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) state_->Read(fd, buf.data(), buf.size());
    }
    state_->Settle();
    state_->Sweep();
    state_->NoteDrops(false);
  }
}

}  // namespace fmstack::comm
