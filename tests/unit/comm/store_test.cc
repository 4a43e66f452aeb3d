// The rendezvous store under misuse: clients without the run's secret get
// nothing, limits give clear errors, and a client that floods requests and
// never reads its replies does not delay the others.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "comm/store_wire.h"
#include "comm/tcp_store.h"
#include "util/error.h"

namespace fmstack::comm {
namespace {

using namespace std::chrono_literals;

struct Logged {
  std::mutex mu;
  std::vector<std::string> lines;
  TcpStoreServer::Log Fn() {
    return [this](const std::string& l) {
      const std::lock_guard lock(mu);
      lines.push_back(l);
    };
  }
  bool Has(const std::string& part) {
    const std::lock_guard lock(mu);
    for (const std::string& l : lines)
      if (l.find(part) != std::string::npos) return true;
    return false;
  }
};

int RawConnect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

// Reads one frame (blocking); "" when the server closed the connection.
std::string RawFrame(int fd) {
  std::string in, frame;
  size_t pos = 0;
  char buf[4096];
  while (!wire::TakeField(in, pos, frame)) {
    pos = 0;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return "";
    in.append(buf, static_cast<size_t>(n));
  }
  return frame;
}

// A client's first message, as TcpStore sends it, at Unix time `ms`.
std::string Hello(const std::string& secret, int64_t ms, const std::string& nonce) {
  const std::string time = fmt::format("{:016x}", ms);
  return wire::Frame(wire::kHello + nonce + time + wire::Mac(secret, "client", nonce, time));
}
int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(Store, ClientsWithoutTheSecretGetNothing) {
  Logged log;
  TcpStoreServer server("127.0.0.1", 0, "right-secret", log.Fn());
  server.Set("k", "v");
  try {
    TcpStore wrong("127.0.0.1", server.port(), "wrong-secret", 2s);
    FAIL() << "a wrong secret was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("refused this process: not this run's secret"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(log.Has("not this run's secret")) << "refusal not logged";
  // A raw client that skips the handshake and asks at once is refused.
  int fd = RawConnect(server.port());
  std::string get(1, static_cast<char>(wire::kGet));
  wire::PutField(get, "k");
  wire::PutField(get, "100");
  const std::string framed = wire::Frame(get);
  ASSERT_EQ(::send(fd, framed.data(), framed.size(), 0), static_cast<ssize_t>(framed.size()));
  EXPECT_TRUE(RawFrame(fd).starts_with(wire::kRefused));
  EXPECT_EQ(RawFrame(fd), "");  // closed, "v" never sent
  ::close(fd);
  // A replayed handshake, and one from a clock 10 minutes off, are refused.
  const std::string nonce = wire::RandomBytes(wire::kNonceBytes);
  for (const auto& [ms, why] : std::vector<std::pair<int64_t, std::string>>{
           {NowMs(), ""}, {NowMs(), "replayed"}, {NowMs() - 600000, "clock skew"}}) {
    fd = RawConnect(server.port());
    const std::string hello =
        Hello("right-secret", ms, why == "clock skew" ? wire::RandomBytes(32) : nonce);
    ASSERT_EQ(::send(fd, hello.data(), hello.size(), 0), static_cast<ssize_t>(hello.size()));
    const std::string answer = RawFrame(fd);
    if (why.empty()) {
      EXPECT_TRUE(answer.starts_with(wire::kAdmitted)) << answer;
    } else {
      EXPECT_TRUE(answer.starts_with(std::string(wire::kRefused) + why)) << answer;
    }
    ::close(fd);
  }
  TcpStore right("127.0.0.1", server.port(), "right-secret", 2s);
  EXPECT_EQ(right.Get("k", 1s), "v");
}

TEST(Store, LimitsAreClearErrorsAtTheClient) {
  StoreLimits limits;
  limits.max_value_bytes = 1000;
  limits.max_total_bytes = 5000;
  TcpStoreServer server("127.0.0.1", 0, "s", {}, limits);
  TcpStore c("127.0.0.1", server.port(), "s", 2s);
  try {
    c.Set("big", std::string(1001, 'x'));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("value of 1001 bytes for 'big', the limit is 1000"),
              std::string::npos)
        << e.what();
  }
  for (int i = 0; i < 4; ++i) c.Set("k" + std::to_string(i), std::string(1000, 'x'));
  EXPECT_THROW(c.Set("k4", std::string(1000, 'x')), Error);  // 5000 bytes would be exceeded
  c.Set("k0", std::string(10, 'y'));                         // replacing frees room
  c.Set("k4", std::string(900, 'x'));
  EXPECT_THROW(c.Add("k0", 1), Error);  // not an integer: an error, not a silence
  EXPECT_EQ(c.Get("k4", 1s).size(), 900u);
}

TEST(Store, AClientThatNeverReadsDoesNotDelayTheOthers) {
  Logged log;
  TcpStoreServer server("127.0.0.1", 0, "s", log.Fn());
  {
    TcpStore setter("127.0.0.1", server.port(), "s", 2s);
    setter.Set("blob", std::string(8 << 20, 'b'));
  }
  // Authenticate by hand, then ask for the 8 MiB value again and again
  // without ever reading a reply.
  const int fd = RawConnect(server.port());
  const std::string auth = Hello("s", NowMs(), wire::RandomBytes(wire::kNonceBytes));
  ASSERT_EQ(::send(fd, auth.data(), auth.size(), 0), static_cast<ssize_t>(auth.size()));
  ASSERT_TRUE(RawFrame(fd).starts_with(wire::kAdmitted));  // the server's proof
  std::string get(1, static_cast<char>(wire::kGet));
  wire::PutField(get, "blob");
  wire::PutField(get, "1000");
  const std::string framed = wire::Frame(get);
  std::thread flood([&] {
    for (int i = 0; i < 400; ++i)
      if (::send(fd, framed.data(), framed.size(), MSG_NOSIGNAL) <= 0) break;
  });
  TcpStore other("127.0.0.1", server.port(), "s", 2s);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) {
    other.Set("n", std::to_string(i));
    EXPECT_EQ(other.Get("n", 1s), std::to_string(i));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  flood.join();
  // Not a timing threshold on speed: a blocked server would never answer
  // within the requests' own deadlines, and every Get above would throw.
  EXPECT_LT(seconds, 60);
  // The server drops the stalled client once its queue passes the bound;
  // give it until a deadline to get there.
  for (int i = 0; i < 200 && !log.Has("stopped reading its replies"); ++i)
    std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(log.Has("stopped reading its replies")) << "the stalled client was not dropped";
  ::close(fd);
}

// 1,000 connections that never send anything, held open: a rank still
// gets in at once (its proof is read as it is accepted), the flood is held
// to max_unauthenticated and noted in one line, not one per connection.
TEST(Store, AFloodWithoutTheSecretDoesNotKeepARankOut) {
  Logged log;
  StoreLimits limits;
  limits.max_unauthenticated = 32;
  TcpStoreServer server("127.0.0.1", 0, "s", log.Fn(), limits);
  std::vector<int> flood;
  for (int i = 0; i < 1000; ++i) flood.push_back(RawConnect(server.port()));
  for (int i = 0; i < 20; ++i) {
    TcpStore rank("127.0.0.1", server.port(), "s", 5s);
    rank.Set("k", std::to_string(i));
    EXPECT_EQ(rank.Get("k", 1s), std::to_string(i));
  }
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(log.Has("evicted by newer ones"));
  {
    const std::lock_guard lock(log.mu);
    EXPECT_LT(log.lines.size(), 10u) << "one line per dropped connection";
  }
  for (const int fd : flood) ::close(fd);
}

}  // namespace
}  // namespace fmstack::comm
