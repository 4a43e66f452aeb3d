#include "util/worker_pool.h"

#include <fmt/format.h>

#include <system_error>

#include "util/error.h"

namespace fmstack {

WorkerPool::WorkerPool(int threads) {
  if (threads < 1 || threads > 256)
    throw Error(fmt::format("worker pool of {} threads: expected 1 to 256", threads));
  threads_.reserve(static_cast<size_t>(threads));
  try {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  } catch (const std::system_error& e) {
    // No destructor runs for a constructor that throws: join those started.
    const size_t started = threads_.size();
    Stop();
    throw Error(fmt::format("worker pool: cannot start thread {} of {}: {}", started + 1, threads,
                            e.what()));
  }
}

WorkerPool::~WorkerPool() {
  Stop();
}

void WorkerPool::Stop() {
  {
    const std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void WorkerPool::Enqueue(std::function<void()> task) {
  {
    const std::lock_guard lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void WorkerPool::Work() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // a packaged_task: an exception goes to its future
  }
}

}  // namespace fmstack
