// TcpCommunicator's allreduce window by window and pipelined, with ranks as
// threads: the windows change where each element is summed, never that
// every rank ends with the same bits, nor (where one path sums each element
// whatever its window, as halving does) the bits themselves; the pipeline
// sums along halving's paths, so it gives the windows' bits.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "comm/path_tuner.h"
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

struct Calls {
  std::vector<std::vector<float>> first;  // every rank's result of the first call
  std::vector<int> differing;             // per rank: later calls whose bits differ from it
};

struct Way {
  size_t window_bytes = 512 << 10;
  size_t alt_window_bytes = 0;  // where the communicator tunes windows; 0: it does not
  size_t pipeline_bytes = 0;    // the pipeline's chunk; 0: windows only
  size_t pipeline_run_bytes = 32 << 20;
};

// `calls` allreduces of the same `count` floats on every rank, each the way
// `way` says.
Calls RepeatOnThreads(int ranks, size_t count, const Way& way, int calls,
                      const std::string& prefix) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  Calls out{std::vector<std::vector<float>>(static_cast<size_t>(ranks)),
            std::vector<int>(static_cast<size_t>(ranks))};
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
        o.window_bytes = way.window_bytes;
        o.alt_window_bytes = way.alt_window_bytes;
        o.pipeline_chunk_bytes = way.pipeline_bytes;
        o.pipeline_run_bytes = way.pipeline_run_bytes;
        o.adapt_when_crowded = true;  // ranks as threads may outnumber the cores
        TcpCommunicator comm(o);
        std::vector<float> buf(count);
        for (int call = 0; call < calls; ++call) {
          for (size_t i = 0; i < count; ++i) buf[i] = Value(r, i);
          comm.AllReduce(std::span<float>(buf), ReduceOp::kSum);
          std::vector<float>& first = out.first[static_cast<size_t>(r)];
          if (call == 0) {
            first = buf;
          } else if (std::memcmp(first.data(), buf.data(), count * sizeof(float)) != 0) {
            ++out.differing[static_cast<size_t>(r)];
          }
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  return out;
}

// Every rank's buffer after one allreduce of `count` floats, with windows of
// `window_bytes`.
std::vector<std::vector<float>> AllReduceOnThreads(int ranks, size_t count, size_t window_bytes,
                                                   const std::string& prefix) {
  return RepeatOnThreads(ranks, count, Way{.window_bytes = window_bytes}, 1, prefix).first;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every rank's every call gave `want`'s bits.
void ExpectEveryCallHas(const Calls& calls, const std::vector<float>& want) {
  for (size_t r = 0; r < calls.first.size(); ++r) {
    EXPECT_EQ(calls.differing[r], 0) << "rank " << r;
    EXPECT_TRUE(SameBits(calls.first[r], want)) << "rank " << r;
  }
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

// With a power of two of ranks, calls beyond one period of the tuner
// (path_tuner.h) time windows of 4 KiB against 512 KiB and then keep rank
// 0's choice, which the others must learn: a rank that kept its own would
// send 2 KiB pieces where its peer expects 200 KiB, and the mesh names
// the mismatch. Each element's path does not depend on the window, so
// every call, exploring or not, gives the bits of an untuned allreduce.
TEST(TcpWindows, TunedWindowsKeepTheBitsAndEveryRankFollowsRankZero) {
  const size_t count = 100003;  // 400 KB
  const int calls = PathTuner::kPeriod + PathTuner::kExplore + 4;
  const Calls tuned = RepeatOnThreads(
      2, count, Way{.window_bytes = 4 << 10, .alt_window_bytes = 512 << 10}, calls, "tuned2");
  ExpectEveryCallHas(tuned, AllReduceOnThreads(2, count, 512 << 10, "untuned2")[0]);
}

// On the ring (3 ranks) the window decides where each element is summed,
// so a tuned window would make the bits depend on timing: there the window
// stays the one asked for, call after call.
TEST(TcpWindows, OnTheRingTheWindowIsNotTuned) {
  const size_t count = 100003;
  const Calls ring =
      RepeatOnThreads(3, count, Way{.window_bytes = 4 << 10, .alt_window_bytes = 512 << 10},
                      PathTuner::kExplore + 4, "ring3");
  ExpectEveryCallHas(ring, AllReduceOnThreads(3, count, 4 << 10, "fixed3")[0]);
}

// 200,003 floats in chunks of 4 KiB (195 chunks of uneven sizes), in Runs
// of 64 KiB (13 of them): every rank ends with the bits of the allreduce
// over the whole buffer at once, at 2, 4 and 8 ranks. Were a chunk's
// reduction allowed ahead of its previous step's, the sum's order, and so
// its bits, would depend on timing.
TEST(TcpPipeline, EveryRankGetsTheBitsOfTheWholeBufferAllReduce) {
  const size_t count = 200003;
  for (const int ranks : {2, 4, 8}) {
    const Way pipelined{.pipeline_bytes = 4 << 10, .pipeline_run_bytes = 64 << 10};
    const auto piped = RepeatOnThreads(ranks, count, pipelined, 2, "p" + std::to_string(ranks));
    const auto whole = AllReduceOnThreads(ranks, count, SIZE_MAX, "pw" + std::to_string(ranks));
    for (int r = 0; r < ranks; ++r) {
      EXPECT_TRUE(SameBits(piped.first[static_cast<size_t>(r)], whole[0]))
          << ranks << " ranks: rank " << r << " differs from the whole-buffer allreduce";
      EXPECT_EQ(piped.differing[static_cast<size_t>(r)], 0) << ranks << " ranks, rank " << r;
    }
    for (size_t i = 0; i < count; i += 997) {
      double want = 0;
      for (int r = 0; r < ranks; ++r) want += Value(r, i);
      EXPECT_NEAR(piped.first[0][i], want, 1e-5 * want) << ranks << " ranks, element " << i;
    }
  }
}

// The tuner times the pipeline (16 KiB chunks, 25 of them) against 4 KiB
// windows: every call, exploring or not, has the untuned bits, and the
// ranks agree on the way each call takes (else the mesh would name a size
// mismatch).
TEST(TcpPipeline, TunedAgainstWindowsKeepsTheBits) {
  const size_t count = 100003;
  const int calls = PathTuner::kPeriod + PathTuner::kExplore + 4;
  const Calls tuned = RepeatOnThreads(
      2, count, Way{.alt_window_bytes = 4 << 10, .pipeline_bytes = 16 << 10}, calls, "ptuned2");
  ExpectEveryCallHas(tuned, AllReduceOnThreads(2, count, 512 << 10, "puntuned2")[0]);
}

TEST(TcpPipeline, AChunkSizeOutsideItsBoundsIsRefusedNamingIt) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  TcpOptions o;
  o.store = std::make_shared<TcpStore>("127.0.0.1", server.port(), kSecret);
  o.pipeline_chunk_bytes = 100;
  try {
    TcpCommunicator comm(o);
    FAIL() << "a 100-byte chunk was accepted";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("FMSTACK_TCP_PIPELINE_BYTES"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fmstack::comm
