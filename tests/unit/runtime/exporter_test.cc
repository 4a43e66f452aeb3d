// The /metrics endpoint: the token, the paths, and what clients without the
// token can hold (slow and idle connections are dropped or evicted while
// scrapes are served); stopping it with clients attached.
#include "metrics/exporter.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace fmstack::metrics {
namespace {

const std::string kToken = "0123456789abcdef0123";

int Dial(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  return fd;
}

// Everything the server sends until it closes or 5 s pass.
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) break;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string Request(int port, const std::string& text) {
  const int fd = Dial(port);
  EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  std::string out = ReadAll(fd);
  ::close(fd);
  return out;
}

std::string Get(const std::string& path, const std::string& auth) {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" +
         (auth.empty() ? "" : "Authorization: " + auth + "\r\n") + "\r\n";
}

TEST(Exporter, ServesTheRegistryOnlyWithTheToken) {
  Registry r;
  r.Gauge("fmstack_step", "step");
  r.Set("fmstack_step", {}, 7);
  Exporter e(r, "127.0.0.1", 0, kToken);
  const std::string ok = Request(e.port(), Get("/metrics", "Bearer " + kToken));
  EXPECT_NE(ok.find("HTTP/1.1 200"), std::string::npos) << ok;
  EXPECT_NE(ok.find("fmstack_step 7"), std::string::npos) << ok;
  EXPECT_NE(Request(e.port(), Get("/metrics", "")).find("HTTP/1.1 401"), std::string::npos);
  EXPECT_NE(Request(e.port(), Get("/metrics", "Bearer " + kToken + "x")).find("HTTP/1.1 401"),
            std::string::npos);
  EXPECT_NE(Request(e.port(), Get("/other", "Bearer " + kToken)).find("HTTP/1.1 404"),
            std::string::npos);
  // A body, or headers past 8 KiB: refused, the connection closed.
  const std::string big =
      "GET /metrics HTTP/1.1\r\nHost: x\r\nX: " + std::string(9000, 'a') + "\r\n\r\n";
  EXPECT_EQ(Request(e.port(), big).find("200"), std::string::npos);
}

TEST(Exporter, DropsASlowRequestAtItsDeadline) {
  Registry r;
  Exporter e(r, "127.0.0.1", 0, kToken, {.request_timeout = std::chrono::milliseconds(200)});
  const int fd = Dial(e.port());
  const std::string part = "GET /metrics HTTP/1.1\r\nHost: x\r\n";  // never finished
  ASSERT_EQ(::write(fd, part.data(), part.size()), static_cast<ssize_t>(part.size()));
  EXPECT_EQ(ReadAll(fd), "");  // closed by the server, not by ReadAll's 5 s
  ::close(fd);
}

TEST(Exporter, IdleClientsMakeRoomForAScrape) {
  Registry r;
  r.Gauge("fmstack_step", "step");
  Exporter e(r, "127.0.0.1", 0, kToken,
             {.max_connections = 8, .request_timeout = std::chrono::seconds(30)});
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) idle.push_back(Dial(e.port()));
  const std::string ok = Request(e.port(), Get("/metrics", "Bearer " + kToken));
  EXPECT_NE(ok.find("HTTP/1.1 200"), std::string::npos) << ok;
  // The oldest were evicted: at most max_connections stay open.
  int open = 0;
  for (const int fd : idle) {
    pollfd p{fd, POLLIN, 0};
    char c;
    if (::poll(&p, 1, 0) == 0 || ::recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK) != 0) ++open;
    ::close(fd);
  }
  EXPECT_LE(open, 8);
}

TEST(Exporter, StopsWithClientsAttached) {
  Registry r;
  std::vector<int> fds;
  {
    Exporter e(r, "127.0.0.1", 0, kToken);
    for (int i = 0; i < 10; ++i) fds.push_back(Dial(e.port()));
  }  // the destructor returns: nothing waits on the clients
  for (const int fd : fds) {
    EXPECT_EQ(ReadAll(fd), "");
    ::close(fd);
  }
}

TEST(Exporter, RefusesAnAddressItCannotBind) {
  Registry r;
  Exporter first(r, "127.0.0.1", 0, kToken);
  try {
    Exporter second(r, "127.0.0.1", first.port(), kToken);
    FAIL() << "a second exporter bound the same port";
  } catch (const std::exception& ex) {
    EXPECT_NE(
        std::string(ex.what()).find("cannot listen on 127.0.0.1:" + std::to_string(first.port())),
        std::string::npos)
        << ex.what();
  }
}

}  // namespace
}  // namespace fmstack::metrics
