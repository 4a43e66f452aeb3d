// The shared-memory reduction window: how it is sized, that a bad ask is a
// clear error, and that every rank of a node stages local rank 0's window
// even when their own asks differ (if each staged its own, the passes would
// not line up and the sums would be wrong or the barriers would time out);
// and that a rank whose segment would differ from local rank 0's is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/shm_comm.h"
#include "comm/tcp_store.h"
#include "fork_ranks.h"

namespace fmstack::comm {
namespace {

const std::string kSecret = "0123456789abcdef-window-secret";

// What a communicator built from `o` is refused with; a test failure naming
// `accepted`, and "", when it is built.
std::string Refusal(const ShmOptions& o, const std::string& accepted) {
  try {
    const ShmCommunicator c(o);
  } catch (const CommError& e) {
    return e.what();
  }
  ADD_FAILURE() << accepted << " was accepted";
  return "";
}

// A node of one rank on `server`, its segment named after `name` and this
// process.
ShmOptions AloneOptions(const TcpStoreServer& server, const std::string& name) {
  ShmOptions o;
  o.store = std::make_shared<TcpStore>("127.0.0.1", server.port(), kSecret);
  o.prefix = name;
  o.segment = "fmstack." + name + "." + std::to_string(::getpid());
  o.size = 1;
  o.job_ranks = {0};
  return o;
}

// Every rank must take local rank 0's pair of lengths (a window, a read).
void RequireRankZeros(int rank, const char* verb, size_t first, size_t second, size_t want_first,
                      size_t want_second) {
  if (first != want_first || second != want_second)
    throw Error("rank " + std::to_string(rank) + " " + verb + " " + std::to_string(first) +
                " and " + std::to_string(second));
}

TEST(ShmWindow, IsAQuarterOfTheL3PerRunningRankWithinBounds) {
  constexpr size_t KiB = 1024, MiB = 1024 * KiB, slot = 4 * MiB;
  EXPECT_EQ(ShmCommunicator::WindowFor(2, slot, 8 * MiB), 1 * MiB);   // the 2-core Zen 1 VM
  EXPECT_EQ(ShmCommunicator::WindowFor(2, slot, 32 * MiB), slot);     // the 2-core Zen 3 VM
  EXPECT_EQ(ShmCommunicator::WindowFor(8, slot, 32 * MiB), 1 * MiB);  // 8 cores on 32 MiB
  EXPECT_EQ(ShmCommunicator::WindowFor(2, 64 * KiB, 32 * MiB), 64 * KiB);
  EXPECT_EQ(ShmCommunicator::WindowFor(64, slot, 8 * MiB), 256 * KiB);  // the floor
  EXPECT_EQ(ShmCommunicator::WindowFor(2, slot, 0), 512 * KiB);         // L3 unknown
  EXPECT_EQ(ShmCommunicator::WindowFor(3, slot, 30 * MiB) % 4096, 0u);  // whole pages
}

TEST(ShmWindow, AnAskOutsideItsBoundsIsRefusedNamingTheVariable) {
  for (const size_t asked : {size_t{1024}, size_t{8} << 20}) {
    ShmOptions o;
    o.segment = "fmstack.window-test";
    o.size = 2;
    o.slot_bytes = 4 << 20;
    o.window_bytes = asked;
    const std::string what = Refusal(o, "a window of " + std::to_string(asked) + " bytes");
    EXPECT_NE(what.find("FMSTACK_SHM_WINDOW_BYTES"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(asked)), std::string::npos) << what;
  }
}

TEST(ShmCmaChunk, IsTheScratchOverThePeersWithinBounds) {
  constexpr size_t KiB = 1024, MiB = 1024 * KiB;
  EXPECT_EQ(ShmCommunicator::CmaChunkFor(1), 8 * MiB);
  EXPECT_EQ(ShmCommunicator::CmaChunkFor(2), 8 * MiB);  // the whole share of a 16 MiB allreduce
  EXPECT_EQ(ShmCommunicator::CmaChunkFor(3), 8 * MiB);
  EXPECT_EQ(ShmCommunicator::CmaChunkFor(8), 2340 * KiB);  // 16 MiB / 7, whole pages
  EXPECT_EQ(ShmCommunicator::CmaChunkFor(64), 260 * KiB);
  EXPECT_EQ(ShmCommunicator::CmaChunkFor(128), 256 * KiB);  // the floor
}

TEST(ShmCmaChunk, AnAskOutsideItsBoundsIsRefusedNamingTheVariable) {
  for (const size_t asked : {size_t{1024}, size_t{32} << 20}) {
    ShmOptions o;
    o.segment = "fmstack.chunk-test";
    o.size = 2;
    o.cma_chunk_bytes = asked;
    const std::string what = Refusal(o, "a read of " + std::to_string(asked) + " bytes");
    EXPECT_NE(what.find("FMSTACK_SHM_CMA_CHUNK_BYTES"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(asked)), std::string::npos) << what;
  }
}

// Local rank `rank` of `size` on one segment, named after the test's process.
ShmOptions RankOptions(const std::string& test, int rank, int size, uint16_t port) {
  ShmOptions o;
  o.store = std::make_shared<TcpStore>("127.0.0.1", port, kSecret);
  o.prefix = test;
  o.segment = "fmstack." + test + "-test." + std::to_string(::getppid());
  o.rank = rank;
  o.size = size;
  for (int r = 0; r < size; ++r) o.job_ranks.push_back(r);
  o.timeout = std::chrono::seconds(10);
  return o;
}

// Three ranks of one node, each running rank_body(rank, 3, store port).
void ExpectThreeRanksClean(void (*rank_body)(int, int, uint16_t)) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  constexpr int kRanks = 3;
  const std::vector<int> status =
      testing::ForkRanks(kRanks, [&](int r) { rank_body(r, kRanks, server.port()); });
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(testing::ExitedCleanly(status[r])) << "rank " << r;
}

// Rank r asks for (r + 1) x 4 KiB; all must stage rank 0's 4 KiB.
void RankWithItsOwnAsk(int rank, int size, uint16_t port) {
  ShmOptions o = RankOptions("window", rank, size, port);
  o.slot_bytes = 64 << 10;
  o.window_bytes = static_cast<size_t>(rank + 1) * 4096;
  ShmCommunicator c(o);
  if (c.window_bytes() != 4096)
    throw Error("rank " + std::to_string(rank) + " stages " + std::to_string(c.window_bytes()));
  std::vector<float> buf(50001);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(rank * 1000 + i % 997);
  c.AllReduce(View(std::span<float>(buf)), ReduceOp::kSum);
  const float ranks = static_cast<float>(size);
  for (size_t i = 0; i < buf.size(); ++i) {
    const float want = 1000.0f * ranks * (ranks - 1) / 2 + ranks * static_cast<float>(i % 997);
    if (buf[i] != want)
      throw Error("rank " + std::to_string(rank) + ": element " + std::to_string(i) + " is " +
                  std::to_string(buf[i]) + ", want " + std::to_string(want));
  }
}

TEST(ShmWindow, EveryRankStagesLocalRankZerosWindow) {
  ExpectThreeRanksClean(RankWithItsOwnAsk);
}

// Through the tuner's exploring, deciding and decided calls, every
// all-reduce of `count` floats must give the in-order sum's bits, whichever
// way each call took.
void ExpectInOrderSums(ShmCommunicator& c, int rank, int size, size_t count) {
  const auto value = [](int r, int call, size_t i) {
    return 1.0f / static_cast<float>(1 + (r * 7919 + call * 104729 + i) % 10007);
  };
  constexpr int kCalls = 2 * PathTuner::kExplore + 4;
  std::vector<float> buf(count);
  for (int call = 0; call < kCalls; ++call) {
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = value(rank, call, i);
    c.AllReduce(View(std::span<float>(buf)), ReduceOp::kSum);
    for (size_t i = 0; i < buf.size(); ++i) {
      float want = value(0, call, i);
      for (int r = 1; r < size; ++r) want += value(r, call, i);
      if (std::memcmp(&buf[i], &want, sizeof want) != 0)
        throw Error("rank " + std::to_string(rank) + ", call " + std::to_string(call) +
                    ": element " + std::to_string(i) + " is " + std::to_string(buf[i]) + ", want " +
                    std::to_string(want));
    }
  }
}

// All-reduce's exploring calls alternate the two windows (path_tuner.h):
// every call, whichever window it took, must give the in-order sum's bits.
void RankTimingTwoWindows(int rank, int size, uint16_t port) {
  ShmOptions o = RankOptions("window2", rank, size, port);
  o.slot_bytes = 256 << 10;
  o.window_bytes = rank == 0 ? 128 << 10 : 64 << 10;
  o.alt_window_bytes = rank == 0 ? 16 << 10 : 0;  // every rank takes rank 0's
  ShmCommunicator c(o);
  RequireRankZeros(rank, "stages", c.window_bytes(), c.alt_window_bytes(), 128 << 10, 16 << 10);
  ExpectInOrderSums(c, rank, size, 40001);
}

TEST(ShmWindow, AllReduceTimesASecondWindowWithTheSameBits) {
  ExpectThreeRanksClean(RankTimingTwoWindows);
}

TEST(ShmWindow, ASecondWindowNotBelowTheFirstIsRefused) {
  ShmOptions o;
  o.segment = "fmstack.window-test";
  o.size = 2;
  o.slot_bytes = 4 << 20;
  o.window_bytes = 1 << 20;
  o.alt_window_bytes = 1 << 20;
  const std::string what = Refusal(o, "a second window as large as the first");
  EXPECT_NE(what.find("second window of 1048576 bytes"), std::string::npos) << what;
}

TEST(ShmWindow, OnlyAWindowSizedFromTheL3IsTuned) {
  // Asked for: kept as asked, not timed against another.
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  ShmOptions o = AloneOptions(server, "window-test-alone");
  o.slot_bytes = 4 << 20;
  o.window_bytes = 2 << 20;
  EXPECT_EQ(ShmCommunicator(o).alt_window_bytes(), 0u);
}

// All-reduce through cross-memory attach times two read lengths on its
// exploring calls: every call, whichever it took, must give the in-order
// sum's bits, and every rank must take local rank 0's lengths (whether to
// tune adds barriers, so the ranks must agree on it).
void RankTimingTwoReads(int rank, int size, uint16_t port) {
  // The single-copy path, ranks outnumbering cores or not.
  ::setenv("FMSTACK_SHM_CMA_REDUCE", "1", 1);
  ShmOptions o = RankOptions("read2", rank, size, port);
  o.slot_bytes = 64 << 10;
  o.cma_chunk_bytes = rank == 0 ? 64 << 10 : 32 << 10;
  o.alt_cma_chunk_bytes = rank == 0 ? 16 << 10 : 0;
  ShmCommunicator c(o);
  RequireRankZeros(rank, "reads", c.cma_chunk_bytes(), c.alt_cma_chunk_bytes(), 64 << 10, 16 << 10);
  ExpectInOrderSums(c, rank, size, 60001);  // a share of 80 KB: five short reads or two long ones
}

TEST(ShmCmaChunk, AllReduceTimesASecondReadWithTheSameBits) {
  ExpectThreeRanksClean(RankTimingTwoReads);
}

TEST(ShmCmaChunk, ASecondReadNotBelowTheFirstIsRefused) {
  ShmOptions o;
  o.segment = "fmstack.chunk-test";
  o.size = 2;
  o.cma_chunk_bytes = 1 << 20;
  o.alt_cma_chunk_bytes = 1 << 20;
  const std::string what = Refusal(o, "a second read as long as the first");
  EXPECT_NE(what.find("second read of 1048576 bytes"), std::string::npos) << what;
}

TEST(ShmCmaChunk, OnlyAReadSizedByTheRankCountIsTuned) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  ShmOptions o = AloneOptions(server, "chunk-test-alone");
  o.slot_bytes = 64 << 10;
  {
    const ShmCommunicator sized(o);  // 8 MiB, timed against 256 KiB
    EXPECT_EQ(sized.cma_chunk_bytes(), size_t{8} << 20);
    EXPECT_EQ(sized.alt_cma_chunk_bytes(), size_t{256} << 10);
  }
  o = AloneOptions(server, "chunk-test-alone-b");
  o.slot_bytes = 64 << 10;
  o.cma_chunk_bytes = 2 << 20;  // asked for: kept as asked, not timed against another
  EXPECT_EQ(ShmCommunicator(o).alt_cma_chunk_bytes(), 0u);
}

// The segment's size follows the post-and-wait setting; a rank that does
// not share local rank 0's must fail naming it, not map past the end of the
// segment and die of SIGBUS in its first collective.
void RankWithAnotherPostWait(int rank, int size, uint16_t port) {
  ::setenv("FMSTACK_SHM_POST_WAIT", rank == 0 ? "1" : "0", 1);
  ShmOptions o = RankOptions("postwait", rank, size, port);
  o.slot_bytes = 64 << 10;
  o.timeout = std::chrono::seconds(2);
  try {
    ShmCommunicator c(o);
  } catch (const CommError& e) {
    const std::string what = e.what();
    // Local rank 0 waits for peers that gave up: it may fail either way.
    if (rank == 0 || what.find("FMSTACK_SHM_POST_WAIT") != std::string::npos) return;
    throw Error("rank " + std::to_string(rank) + ": " + what);
  }
  if (rank != 0) throw Error("rank " + std::to_string(rank) + " attached to rank 0's segment");
}

TEST(ShmSegment, ARankThatDisagreesOnPostAndWaitFailsNamingIt) {
  ExpectThreeRanksClean(RankWithAnotherPostWait);
}

// A post-and-wait call has one deadline for all its peers. Rank 1 posts
// late (0.8 s) and rank 2 never does: rank 0 must give up about 1 s after
// it started, not 1 s after rank 1 came (1.8 s), as a timeout of its own
// per peer would.
void RankAgainstTheDeadline(int rank, int size, uint16_t port) {
  ::setenv("FMSTACK_SHM_POST_WAIT", "1", 1);
  ShmOptions o = RankOptions("deadline", rank, size, port);
  o.slot_bytes = 64 << 10;
  o.timeout = std::chrono::seconds(1);
  ShmCommunicator c(o);
  if (rank == 2) {
    std::this_thread::sleep_for(std::chrono::seconds(3));  // alive and silent
    return;
  }
  if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(800));
  std::vector<float> buf(1024, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  try {
    c.AllReduce(View(std::span<float>(buf)), ReduceOp::kSum);
  } catch (const CommError& e) {
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (std::string(e.what()).find("timed out") == std::string::npos)
      throw Error("rank " + std::to_string(rank) + ": " + e.what());
    if (rank == 0 && waited > 1.4)
      throw Error("rank 0 gave up after " + std::to_string(waited) + " s with a 1 s timeout");
    return;
  }
  throw Error("rank " + std::to_string(rank) + ": the allreduce returned without rank 2");
}

TEST(ShmSegment, APostAndWaitCallHasOneDeadlineForAllItsPeers) {
  ExpectThreeRanksClean(RankAgainstTheDeadline);
}

TEST(ShmSegment, APostAndWaitValueOtherThanZeroOrOneIsRefused) {
  ::setenv("FMSTACK_SHM_POST_WAIT", "yes", 1);
  ShmOptions o;
  o.segment = "fmstack.window-test";
  o.size = 2;
  try {
    ShmCommunicator c(o);
    ADD_FAILURE() << "FMSTACK_SHM_POST_WAIT=yes was accepted";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("FMSTACK_SHM_POST_WAIT=yes: expected 0 or 1"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv("FMSTACK_SHM_POST_WAIT");
}

}  // namespace
}  // namespace fmstack::comm
