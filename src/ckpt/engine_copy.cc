// ckpt: Save()'s blocking part, the snapshot's copy into the staging pool:
// every slot at once on several threads (and the device's copy engine), or
// slot by slot to the writer when the pool is smaller than the state; and
// abandoning a save whose copy cannot finish.
#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "ckpt/engine.h"
#include "ckpt/engine_job.h"
#include "ckpt/staging_copy.h"
#include "ckpt/staging_pool.h"
#include "util/error.h"

namespace fmstack::ckpt {

int CopyThreadsFor(int cpus) {
  return std::clamp(cpus, 2, kMaxCopyThreads);
}

int DefaultCopyThreads() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const int cpus = ::sched_getaffinity(0, sizeof allowed, &allowed) == 0
                       ? CPU_COUNT(&allowed)
                       : static_cast<int>(std::thread::hardware_concurrency());
  return CopyThreadsFor(cpus);
}

void Engine::CopyAll(std::span<const TensorSlice> slices, DeviceSource* device, Job& job,
                     const std::vector<Slot*>& slots) {
  std::vector<std::span<const std::byte>> sources;
  std::vector<char> on_device;
  int64_t left = 0;
  for (const TensorSlice& s : slices) {
    sources.push_back(s.data);
    on_device.push_back(s.on_device ? 1 : 0);
    left += static_cast<int64_t>(s.data.size());
  }
  std::vector<char*> to;
  for (Slot* slot : slots) to.push_back(slot->data.get());
  if (device != nullptr) {
    try {
      device->CopyToHost(PlanDeviceCopies(sources, on_device, to, options_.chunk_bytes));
    } catch (const std::exception& e) {
      AbandonCopy(job, slots, e);
    }
  }
  CopyToSlots(sources, to, options_.chunk_bytes, options_.copy_threads, on_device);
  const std::lock_guard lock(mu_);
  for (Slot* slot : slots) {
    slot->used = std::min(left, options_.chunk_bytes);
    left -= slot->used;
    if (job.abandoned) {
      pool_->Release(slot);  // Wait() gave up on it from another thread
    } else {
      job.filled.push_back(slot);
    }
  }
}

// A pool smaller than the snapshot: fill slots one by one and hand each to
// the writer, waiting for it to free slots.
void Engine::CopyStreamingToWriter(std::span<const TensorSlice> slices, DeviceSource* device,
                                   Job& job) {
  Slot* cur = nullptr;
  // Waking the writer per slot costs two context switches on a busy machine;
  // it only needs waking per slot when it must free slots for this copy.
  bool streaming = false;
  auto hand_over = [&] {
    {
      const std::lock_guard lock(mu_);
      if (job.abandoned) {
        pool_->Release(cur);
      } else {
        job.filled.push_back(cur);
      }
    }
    if (streaming) cv_.notify_all();
    cur = nullptr;
  };
  for (const TensorSlice& s : slices) {
    std::span<const std::byte> bytes = s.data;
    while (!bytes.empty()) {
      if (cur == nullptr && (cur = pool_->TryAcquire()) == nullptr) {
        {
          const std::lock_guard lock(mu_);
          job.streaming = streaming = true;
        }
        cv_.notify_all();
        cur = pool_->Acquire(options_.slot_timeout_seconds);
        if (cur == nullptr) Abandon(job);
      }
      const size_t n =
          std::min(bytes.size(), static_cast<size_t>(options_.chunk_bytes - cur->used));
      if (s.on_device) {
        const DeviceSource::Copy copy{cur->data.get() + cur->used, bytes.data(), n};
        try {
          device->CopyToHost({&copy, 1});
        } catch (const std::exception& e) {
          AbandonCopy(job, {&cur, 1}, e);
        }
      } else {
        CopyStreaming(cur->data.get() + cur->used, bytes.data(), n);
      }
      cur->used += static_cast<int64_t>(n);
      bytes = bytes.subspan(n);
      if (cur->used == options_.chunk_bytes) hand_over();
    }
  }
  if (cur != nullptr) hand_over();
}

bool Engine::Abandoned(const Job& job) {
  const std::lock_guard lock(mu_);
  return job.abandoned;
}

void Engine::Abandon(Job& job) {
  {
    const std::lock_guard lock(mu_);
    job.abandoned = true;
  }
  cv_.notify_all();
  throw Error(fmt::format(
      "checkpoint: {} abandoned: waited {:.0f} s for the writer to free a staging slot, but the "
      "{} tier has not finished writing {} (a hung disk or file system?); earlier checkpoints "
      "are untouched",
      StepDirName(job.step()), options_.slot_timeout_seconds, tiers_[0]->name(),
      tiers_[0]->Where(job.step(), job.file)));
}

void Engine::AbandonCopy(Job& job, std::span<Slot* const> held, const std::exception& e) {
  for (Slot* slot : held) pool_->Release(slot);
  {
    const std::lock_guard lock(mu_);
    job.abandoned = true;
  }
  cv_.notify_all();
  throw Error(fmt::format(
      "checkpoint: {} abandoned: copying its tensors out of device memory failed: {}; earlier "
      "checkpoints are untouched",
      StepDirName(job.step()), e.what()));
}

}  // namespace fmstack::ckpt
