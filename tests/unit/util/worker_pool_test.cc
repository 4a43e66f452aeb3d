#include "util/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>

#include "util/error.h"

namespace fmstack {
namespace {

TEST(WorkerPool, ResultsComeBackThroughTheirFutures) {
  WorkerPool pool(2);
  std::vector<std::future<int>> results;
  for (int i = 0; i < 50; ++i) results.push_back(pool.Submit([i] { return i * i; }));
  for (int i = 0; i < 50; ++i) EXPECT_EQ(results[i].get(), i * i);
}

TEST(WorkerPool, AnExceptionReachesTheCallerAndThePoolGoesOn) {
  WorkerPool pool(1);
  auto failing = pool.Submit([]() -> int { throw std::runtime_error("disk full"); });
  auto next = pool.Submit([] { return 7; });
  EXPECT_THROW(
      {
        try {
          failing.get();
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "disk full");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_EQ(next.get(), 7);
}

// The checkpoint writer relies on its pieces being written at once: three
// tasks that each wait for the other two finish only on three threads.
TEST(WorkerPool, ItsThreadsRunTasksAtTheSameTime) {
  WorkerPool pool(3);
  std::atomic<int> arrived = 0;
  auto meet = [&] {
    ++arrived;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (arrived.load() < 3 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    return arrived.load() == 3;
  };
  auto a = pool.Submit(meet), b = pool.Submit(meet), c = pool.Submit(meet);
  EXPECT_TRUE(a.get());
  EXPECT_TRUE(b.get());
  EXPECT_TRUE(c.get());
}

TEST(WorkerPool, DestructionRunsWhatWasQueued) {
  std::atomic<int> ran = 0;
  {
    WorkerPool pool(1);
    for (int i = 0; i < 20; ++i) pool.Submit([&] { ++ran; });
  }
  EXPECT_EQ(ran.load(), 20);
}

TEST(WorkerPool, ASizeOutsideItsBoundsIsAClearError) {
  EXPECT_THROW(WorkerPool(0), Error);
  EXPECT_THROW(WorkerPool(257), Error);
  EXPECT_EQ(WorkerPool(4).size(), 4);
}

}  // namespace
}  // namespace fmstack
