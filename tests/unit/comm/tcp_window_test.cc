// TcpCommunicator's allreduce window by window, with ranks as threads: the
// windows change where each element is summed, never that every rank ends
// with the same bits, nor (where one path sums each element whatever its
// window, as halving does) the bits themselves.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "comm/tcp_comm.h"
#include "comm/tcp_store.h"

namespace fmstack::comm {
namespace {

const std::string kSecret = "tcp-window-test-secret-012345678";

// Values whose sums round differently in different orders.
float Value(int rank, size_t i) {
  return 1.0f / static_cast<float>(1 + (i * 7919 + static_cast<size_t>(rank) * 104729) % 997) +
         static_cast<float>(rank) * 1e-3f;
}

// Every rank's buffer after one allreduce of `count` floats, with windows of
// `window_bytes`.
std::vector<std::vector<float>> AllReduceOnThreads(int ranks, size_t count, size_t window_bytes,
                                                   const std::string& prefix) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  std::vector<std::vector<float>> bufs(static_cast<size_t>(ranks), std::vector<float>(count));
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        TcpOptions o;
        o.prefix = prefix;
        o.rank = r;
        o.size = ranks;
        o.timeout = std::chrono::seconds(20);
        o.store = std::make_shared<TcpStore>("127.0.0.1", server.port(), kSecret);
        o.window_bytes = window_bytes;
        TcpCommunicator comm(o);
        std::vector<float>& buf = bufs[static_cast<size_t>(r)];
        for (size_t i = 0; i < count; ++i) buf[i] = Value(r, i);
        comm.AllReduce(std::span<float>(buf), ReduceOp::kSum);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  return bufs;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// 200,003 floats in 4 KiB windows: 196 windows of uneven sizes, on the ring
// (3 ranks) and on halving (2 and 4 ranks).
TEST(TcpWindows, EveryRankGetsTheSameBitsAndTheSumItExpects) {
  const size_t count = 200003;
  for (const int ranks : {2, 3, 4}) {
    const auto windowed = AllReduceOnThreads(ranks, count, 4 << 10, "w" + std::to_string(ranks));
    for (int r = 1; r < ranks; ++r) {
      EXPECT_TRUE(SameBits(windowed[0], windowed[static_cast<size_t>(r)]))
          << ranks << " ranks: rank " << r << " differs from rank 0";
    }
    for (size_t i = 0; i < count; i += 997) {
      double want = 0;
      for (int r = 0; r < ranks; ++r) want += Value(r, i);
      EXPECT_NEAR(windowed[0][i], want, 1e-5 * want) << ranks << " ranks, element " << i;
    }
    if (ranks != 3) {
      // Halving sums each element along the same path in any window.
      const auto whole = AllReduceOnThreads(ranks, count, SIZE_MAX, "x" + std::to_string(ranks));
      EXPECT_TRUE(SameBits(windowed[0], whole[0])) << ranks << " ranks";
    }
  }
}

}  // namespace
}  // namespace fmstack::comm
