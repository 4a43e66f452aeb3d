// The TCP mesh's handshake and framing, with ranks as threads: a stranger
// that connects to a rank's published port without the key it published is
// refused, the mesh still forms, and a message of the wrong size is an
// error naming the peer; several transfers to one peer move in list order,
// each after the one it waits for; every frame pads its message's bytes to
// an aligned stream offset, and both ends agree on each padding.
#include "comm/tcp_mesh.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "comm/tcp_store.h"

namespace fmstack::comm {
namespace {

const std::string kSecret = "tcp-mesh-test-secret-0123456789";

TcpMeshOptions Options(int rank) {
  TcpMeshOptions o;
  o.prefix = "mesh";
  o.rank = rank;
  o.size = 2;
  o.timeout = std::chrono::seconds(10);
  return o;
}

Transfer Message(Transfer::Kind kind, int peer, void* data, size_t bytes) {
  Transfer t;
  t.kind = kind;
  t.peer = peer;
  t.data = static_cast<std::byte*>(data);
  t.bytes = bytes;
  return t;
}

// Connects to rank 0's published port; the connection waits in its
// backlog, ahead of rank 1's.
int ImpostorConnect(TcpStore& store) {
  const std::string addr = store.Get("mesh/addr/0", std::chrono::seconds(10));
  unsigned port = 0;
  char host[64] = {};
  if (std::sscanf(addr.c_str(), "%63s %u", host, &port) != 2) return -1;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, host, &sa.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return -1;
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Answers rank 0's greeting with a hello that claims rank 1 but carries a
// MAC made without the key. Returns what the listener did then: "closed"
// when it hung up.
std::string ImpostorHello(int fd) {
  char greeting[40];
  size_t got = 0;
  while (got < sizeof greeting) {
    const ssize_t n = ::recv(fd, greeting + got, sizeof greeting - got, 0);
    if (n <= 0) return "no greeting";
    got += static_cast<size_t>(n);
  }
  std::string hello(4 + 32 + 32, 'x');
  const uint32_t rank = 1;
  std::memcpy(hello.data(), &rank, 4);
  ::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
  char c = 0;
  const ssize_t n = ::recv(fd, &c, 1, 0);
  ::close(fd);
  return n == 0 ? "closed" : "answered";
}

TEST(TcpMesh, AStrangerWithoutTheKeyIsRefusedAndTheMeshStillForms) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  TcpStore store0("127.0.0.1", server.port(), kSecret);
  TcpStore store1("127.0.0.1", server.port(), kSecret);
  TcpStore store2("127.0.0.1", server.port(), kSecret);
  std::string impostor, error0, error1;
  std::vector<float> got(1000, 0.0f);
  std::thread rank0([&] {
    try {
      TcpMesh mesh(store0, Options(0));
      std::vector<float> mine(1000, 7.0f);
      Transfer t = Message(Transfer::kSend, 1, mine.data(), mine.size() * sizeof(float));
      mesh.Run(std::span(&t, 1), "test");
    } catch (const std::exception& e) {
      error0 = e.what();
    }
  });
  const int fd = ImpostorConnect(store2);
  ASSERT_GE(fd, 0);
  std::thread stranger([&] { impostor = ImpostorHello(fd); });
  std::thread rank1([&] {
    try {
      TcpMesh mesh(store1, Options(1));
      Transfer t = Message(Transfer::kRecv, 0, got.data(), got.size() * sizeof(float));
      mesh.Run(std::span(&t, 1), "test");
    } catch (const std::exception& e) {
      error1 = e.what();
    }
  });
  rank0.join();
  rank1.join();
  stranger.join();
  EXPECT_EQ(impostor, "closed");
  EXPECT_EQ(error0, "");
  EXPECT_EQ(error1, "");
  EXPECT_EQ(got[999], 7.0f);
}

TEST(TcpMesh, AMessageOfTheWrongSizeNamesThePeer) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  TcpStore store0("127.0.0.1", server.port(), kSecret);
  TcpStore store1("127.0.0.1", server.port(), kSecret);
  std::string error1;
  std::vector<std::byte> buf(64);
  std::thread rank0([&] {
    TcpMesh mesh(store0, Options(0));
    Transfer t = Message(Transfer::kSend, 1, buf.data(), 48);
    mesh.Run(std::span(&t, 1), "allgather");
  });
  std::thread rank1([&] {
    TcpMesh mesh(store1, Options(1));
    std::vector<std::byte> in(64);
    Transfer t = Message(Transfer::kRecv, 0, in.data(), 64);
    try {
      mesh.Run(std::span(&t, 1), "allgather");
    } catch (const std::exception& e) {
      error1 = e.what();
    }
  });
  rank0.join();
  rank1.join();
  EXPECT_NE(error1.find("receiving from rank 0"), std::string::npos) << error1;
  EXPECT_NE(error1.find("sent 48 bytes where this rank expected 64"), std::string::npos) << error1;
}

TEST(TcpMesh, EveryFramePutsItsBytesAtAnAlignedStreamOffset) {
  for (uint64_t offset = 0; offset < 4 * kFrameAlign + 3; ++offset) {
    const size_t header = FrameHeaderBytes(offset);
    EXPECT_GE(header, kFrameLengthBytes) << "at stream offset " << offset;
    EXPECT_LE(header, kFrameHeaderMax) << "at stream offset " << offset;
    EXPECT_EQ((offset + header) % kFrameAlign, 0u) << "at stream offset " << offset;
  }
  EXPECT_EQ(FrameHeaderBytes(kFrameAlign - kFrameLengthBytes), kFrameLengthBytes);
  EXPECT_EQ(FrameHeaderBytes(1'000'000 * kFrameAlign), kFrameAlign);
}

// Messages of sizes that leave the stream at every kind of offset, both
// ways at once and over several Runs: each end pads by its own count of
// the stream, so a disagreement would shift the bytes or fail the length.
TEST(TcpMesh, MessagesOfEverySizeArriveWholeWhateverTheirPadding) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  TcpStore store0("127.0.0.1", server.port(), kSecret);
  TcpStore store1("127.0.0.1", server.port(), kSecret);
  const std::vector<size_t> sizes = {0, 1, 7, 8, 9, 63, 64, 65, 4095, 4097, 100'003, 1 << 20};
  const auto pattern = [](int from, size_t message, size_t i) {
    return static_cast<std::byte>((i * 131 + message * 17 + static_cast<size_t>(from) * 7) & 0xff);
  };
  std::string errors[2];
  std::vector<std::vector<std::byte>> got[2];
  const auto rank = [&](int me, TcpStore& store) {
    try {
      TcpMesh mesh(store, Options(me));
      got[me].resize(sizes.size());
      std::vector<std::vector<std::byte>> out(sizes.size());
      for (size_t m = 0; m < sizes.size(); ++m) {
        out[m].resize(sizes[m]);
        for (size_t i = 0; i < sizes[m]; ++i) out[m][i] = pattern(me, m, i);
        got[me][m].assign(sizes[m], std::byte{0});
      }
      for (size_t first = 0; first < sizes.size(); first += 4) {  // three Runs
        std::vector<Transfer> step;
        for (size_t m = first; m < std::min(first + 4, sizes.size()); ++m) {
          step.push_back(Message(Transfer::kSend, 1 - me, out[m].data(), sizes[m]));
          step.push_back(Message(Transfer::kRecv, 1 - me, got[me][m].data(), sizes[m]));
        }
        mesh.Run(step, "frames");
      }
    } catch (const std::exception& e) {
      errors[me] = e.what();
    }
  };
  std::thread rank0(rank, 0, std::ref(store0));
  std::thread rank1(rank, 1, std::ref(store1));
  rank0.join();
  rank1.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  for (int me = 0; me < 2; ++me) {
    for (size_t m = 0; m < sizes.size(); ++m) {
      size_t wrong = 0;
      for (size_t i = 0; i < sizes[m]; ++i) wrong += got[me][m][i] != pattern(1 - me, m, i);
      EXPECT_EQ(wrong, 0u) << "rank " << me << ", message " << m << " of " << sizes[m] << " bytes";
    }
  }
}

// Rank 0 lists a small send, a 4 MiB receive, and a send of what that
// receive brings, which waits for it: rank 1 gets its own 4 MiB back. Sent
// before the receive finished, it would carry zeros; sent out of list
// order, rank 1 would name a size mismatch.
TEST(TcpMesh, TransfersToOnePeerMoveInListOrderEachAfterWhatItWaitsFor) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  TcpStore store0("127.0.0.1", server.port(), kSecret);
  TcpStore store1("127.0.0.1", server.port(), kSecret);
  const size_t n = 1 << 20;
  std::vector<float> small(1000, 7.0f), echo(n), mine(n), back(n), got_small(1000);
  for (size_t i = 0; i < n; ++i) mine[i] = static_cast<float>(i % 4099) + 0.5f;
  std::string error0, error1;
  std::thread rank0([&] {
    try {
      TcpMesh mesh(store0, Options(0));
      Transfer steps[3] = {Message(Transfer::kSend, 1, small.data(), small.size() * 4),
                           Message(Transfer::kRecv, 1, echo.data(), n * 4),
                           Message(Transfer::kSend, 1, echo.data(), n * 4)};
      steps[2].after = 1;
      mesh.Run(steps, "echo");
    } catch (const std::exception& e) {
      error0 = e.what();
    }
  });
  std::thread rank1([&] {
    try {
      TcpMesh mesh(store1, Options(1));
      Transfer steps[3] = {Message(Transfer::kSend, 0, mine.data(), n * 4),
                           Message(Transfer::kRecv, 0, got_small.data(), got_small.size() * 4),
                           Message(Transfer::kRecv, 0, back.data(), n * 4)};
      mesh.Run(steps, "echo");
    } catch (const std::exception& e) {
      error1 = e.what();
    }
  });
  rank0.join();
  rank1.join();
  EXPECT_EQ(error0, "");
  EXPECT_EQ(error1, "");
  EXPECT_EQ(got_small[999], 7.0f);
  EXPECT_EQ(std::memcmp(back.data(), mine.data(), n * 4), 0) << "the echo left before it arrived";
}

TEST(TcpMesh, ATransferThatWaitsForALaterOneIsRefused) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  TcpStore store0("127.0.0.1", server.port(), kSecret);
  TcpStore store1("127.0.0.1", server.port(), kSecret);
  std::string error0;
  std::thread rank1([&] { TcpMesh mesh(store1, Options(1)); });
  TcpMesh mesh(store0, Options(0));
  rank1.join();
  std::byte b[1];
  Transfer steps[2] = {Message(Transfer::kSend, 1, b, 1), Message(Transfer::kRecv, 1, b, 1)};
  steps[0].after = 1;
  try {
    mesh.Run(steps, "step");
  } catch (const std::exception& e) {
    error0 = e.what();
  }
  EXPECT_NE(error0.find("transfer 0 waits for transfer 1"), std::string::npos) << error0;
}

// Rank 1 takes the first of rank 0's three messages and leaves: rank 0's
// Run fails at once, naming rank 1, instead of waiting out its timeout.
TEST(TcpMesh, APeerThatLeavesMidRunIsNamed) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  TcpStore store0("127.0.0.1", server.port(), kSecret);
  TcpStore store1("127.0.0.1", server.port(), kSecret);
  std::vector<std::byte> a(4096), big(8 << 20), in(8 << 20);
  std::string error0;
  std::thread rank1([&] {
    TcpMesh mesh(store1, Options(1));
    Transfer t = Message(Transfer::kRecv, 0, a.data(), a.size());
    mesh.Run(std::span(&t, 1), "leave");
  });
  const auto start = std::chrono::steady_clock::now();
  try {
    TcpMesh mesh(store0, Options(0));
    Transfer steps[3] = {Message(Transfer::kSend, 1, a.data(), a.size()),
                         Message(Transfer::kSend, 1, big.data(), big.size()),
                         Message(Transfer::kRecv, 1, in.data(), in.size())};
    mesh.Run(steps, "leave");
  } catch (const std::exception& e) {
    error0 = e.what();
  }
  rank1.join();
  EXPECT_NE(error0.find("rank 1"), std::string::npos) << error0;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << error0;
}

}  // namespace
}  // namespace fmstack::comm
