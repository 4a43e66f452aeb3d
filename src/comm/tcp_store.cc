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

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace fmstack::comm {
namespace {

// Wire format: every message is u32 length + payload. A request payload is
// an op byte followed by fields, each u32 length + bytes; a reply is a status
// byte followed by one field.
enum Op : uint8_t { kSet = 1, kGet = 2, kWait = 3, kAdd = 4 };
enum Status : uint8_t { kOk = 0, kTimeout = 1 };

void PutField(std::string& out, const std::string& field) {
  const auto n = static_cast<uint32_t>(field.size());
  out.append(reinterpret_cast<const char*>(&n), 4);
  out.append(field);
}

bool TakeField(const std::string& in, size_t& pos, std::string& field) {
  if (pos + 4 > in.size()) return false;
  uint32_t n = 0;
  std::memcpy(&n, in.data() + pos, 4);
  if (pos + 4 + n > in.size()) return false;
  field.assign(in, pos + 4, n);
  pos += 4 + n;
  return true;
}

std::string Frame(const std::string& payload) {
  std::string out;
  PutField(out, payload);
  return out;
}

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

// ---------------------------------------------------------------- server ---

struct TcpStoreServer::State {
  struct Conn {
    std::string in;
  };
  struct Waiter {
    int fd;
    Op op;
    std::vector<std::string> keys;
    std::chrono::steady_clock::time_point deadline;
  };
  std::mutex mu;
  std::map<std::string, std::string> data;
  std::map<int, Conn> conns;
  std::vector<Waiter> waiters;
  bool stop = false;

  bool Has(const std::vector<std::string>& keys) const {
    for (const auto& k : keys) {
      if (!data.contains(k)) return false;
    }
    return true;
  }
  void Reply(int fd, Status s, const std::string& field) {
    std::string payload(1, static_cast<char>(s));
    PutField(payload, field);
    try {
      SendAll(fd, Frame(payload));
    } catch (const Error&) {
      // The client went away; its connection is dropped on the next poll.
    }
  }
  void Answer(const Waiter& w) { Reply(w.fd, kOk, w.op == kGet ? data[w.keys[0]] : std::string()); }
  // Answers every waiter whose keys now exist or whose deadline passed.
  void Settle() {
    const auto now = std::chrono::steady_clock::now();
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
  void Handle(int fd, const std::string& msg) {
    size_t pos = 1;
    if (msg.empty()) return;
    const auto op = static_cast<Op>(msg[0]);
    std::vector<std::string> fields;
    std::string f;
    while (TakeField(msg, pos, f)) fields.push_back(f);
    if (op == kSet && fields.size() == 2) {
      data[fields[0]] = fields[1];
      Reply(fd, kOk, {});
    } else if (op == kAdd && fields.size() == 2) {
      const int64_t sum =
          (data.contains(fields[0]) ? std::stoll(data[fields[0]]) : 0) + std::stoll(fields[1]);
      data[fields[0]] = std::to_string(sum);
      Reply(fd, kOk, data[fields[0]]);
    } else if ((op == kGet || op == kWait) && fields.size() >= 2) {
      const auto ms = std::stoll(fields.back());
      fields.pop_back();
      waiters.push_back(
          Waiter{fd, op, fields, std::chrono::steady_clock::now() + std::chrono::milliseconds(ms)});
    }
    Settle();
  }
};

TcpStoreServer::TcpStoreServer(const std::string& host, uint16_t port)
    : state_(std::make_unique<State>()) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw Error(Errno("store: socket"));
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
    const std::string e = Errno(fmt::format("store: bind {}:{}", host, port).c_str());
    ::close(listen_fd_);
    throw Error(e);
  }
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
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
  state_->data[key] = value;
  state_->Settle();
}

bool TcpStoreServer::Has(const std::string& key) const {
  std::lock_guard lock(state_->mu);
  return state_->data.contains(key);
}

void TcpStoreServer::Serve() {
  std::vector<pollfd> fds;
  char buf[64 * 1024];
  for (;;) {
    {
      std::lock_guard lock(state_->mu);
      if (state_->stop) return;
      fds.assign({{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}});
      for (const auto& [fd, conn] : state_->conns) fds.push_back({fd, POLLIN, 0});
    }
    // Wake at least every 50 ms to expire waiters.
    if (::poll(fds.data(), fds.size(), 50) < 0 && errno != EINTR) return;
    std::lock_guard lock(state_->mu);
    if (fds[0].revents & POLLIN) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        state_->conns[fd] = {};
      }
    }
    if (fds[1].revents & POLLIN) {
      uint64_t v;
      (void)!::read(wake_fd_, &v, sizeof v);
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int fd = fds[i].fd;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) {
        std::erase_if(state_->waiters, [fd](const State::Waiter& w) { return w.fd == fd; });
        state_->conns.erase(fd);
        ::close(fd);
        continue;
      }
      std::string& in = state_->conns[fd].in;
      in.append(buf, static_cast<size_t>(n));
      size_t pos = 0;
      std::string msg;
      try {
        while (TakeField(in, pos, msg)) state_->Handle(fd, msg);
      } catch (const std::exception&) {
        // A malformed request (e.g. a non-numeric ADD) is dropped; the client
        // sees no reply and times out with the store's address in its error.
      }
      in.erase(0, pos);
    }
    state_->Settle();
  }
}

// ---------------------------------------------------------------- client ---

TcpStore::TcpStore(const std::string& host, uint16_t port,
                   std::chrono::milliseconds connect_timeout)
    : address_(fmt::format("{}:{}", host, port)) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    throw Error(fmt::format("store: MASTER_ADDR '{}' is not an IPv4 address", host));
  }
  const auto deadline = std::chrono::steady_clock::now() + connect_timeout;
  for (;;) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) break;
    const std::string e = Errno("connect");
    ::close(fd_);
    fd_ = -1;
    if (std::chrono::steady_clock::now() > deadline) {
      throw Error(fmt::format("store: cannot reach the rendezvous store at {} within {} ms ({})",
                              address_, connect_timeout.count(), e));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
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

}  // namespace fmstack::comm
