// ckpt: the engine's staging pool, apart from the engine for length only
// (included by engine.cc alone). Slots of chunk_bytes hold a snapshot
// between Save() and the writer.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <vector>

#include "ckpt/engine.h"
#include "util/error.h"
#include "util/huge_pages.h"

namespace fmstack::ckpt {

// Frees a slot's bytes the way Pool::Allocate took them.
struct SlotFree {
  size_t bytes = 0;
  void operator()(char* p) const {
    if (bytes >= kHugePageBytes) {
      UnmapHugePages(p, bytes);
    } else {
      std::free(p);
    }
  }
};

struct Engine::Slot {
  std::unique_ptr<char, SlotFree> data;
  int64_t used = 0;
};

// Fixed slots of chunk_bytes, touched once when created so that no save
// pays page faults; Acquire waits, up to a deadline, while all are in
// flight. Slots of 2 MiB and more are on transparent huge pages
// (util/huge_pages.h). On the Zen 5 VM a 2-thread copy of 4 GB between
// 4 KiB-page buffers took 0.15-0.22 s right after another copy, but
// 0.22-0.43 s after five seconds of sleep or of a spinning thread, which
// is how a snapshot finds its buffers once per checkpoint interval; with
// both on huge pages, 0.14-0.19 s either way. In bench_ckpt the blocking
// save of 4 GB went from 0.76 s to 0.17-0.19 s.
class Engine::Pool {
 public:
  Pool(int64_t slot_bytes, int64_t slots) : slot_bytes_(slot_bytes) {
    for (int64_t i = 0; i < slots; ++i) {
      auto s = std::make_unique<Slot>();
      s->data = Allocate(static_cast<size_t>(slot_bytes));
      if (!s->data)
        throw Error(fmt::format("checkpoint: cannot allocate a staging pool of {} bytes",
                                slot_bytes * slots));
      // Not zeros: a page of zeros may stay shared with the zero page (or be
      // reclaimed by the hypervisor) and fault again on the first save.
      std::memset(s->data.get(), 0xa5, static_cast<size_t>(slot_bytes));
      free_.push_back(s.get());
      all_.push_back(std::move(s));
    }
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  ~Pool() { Unpin(); }

  // Pins every slot through `device`, once: the first source that asks
  // pins the pool for the engine's life (one process has one device
  // runtime, and any of its sources pins the same way).
  void PinFor(const std::shared_ptr<DeviceSource>& device) {
    if (pinned_by_ || !device) return;
    size_t done = 0;
    try {
      for (; done < all_.size(); ++done) device->Pin(Span(*all_[done]));
    } catch (...) {
      for (size_t i = 0; i < done; ++i) device->Unpin(Span(*all_[i]));
      throw;
    }
    pinned_by_ = device;
  }
  Slot* TryAcquire() {
    const std::lock_guard lock(mu_);
    return free_.empty() ? nullptr : Take();
  }
  // All n slots, or none when fewer are free.
  std::vector<Slot*> TryAcquireAll(int64_t n) {
    const std::lock_guard lock(mu_);
    std::vector<Slot*> out;
    if (static_cast<int64_t>(free_.size()) < n) return out;
    for (int64_t i = 0; i < n; ++i) out.push_back(Take());
    return out;
  }
  // Null when no slot was freed within `seconds`.
  Slot* Acquire(double seconds) {
    std::unique_lock lock(mu_);
    const bool freed =
        cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return !free_.empty(); });
    return freed ? Take() : nullptr;
  }
  void Release(Slot* s) {
    {
      const std::lock_guard lock(mu_);
      free_.push_back(s);
    }
    cv_.notify_one();
  }
  int64_t bytes() const { return slot_bytes_ * static_cast<int64_t>(all_.size()); }

 private:
  static std::unique_ptr<char, SlotFree> Allocate(size_t bytes) {
    if (bytes < kHugePageBytes)
      return {static_cast<char*>(std::aligned_alloc(4096, bytes)), SlotFree{bytes}};
    try {
      return {static_cast<char*>(MapHugePages(bytes)), SlotFree{bytes}};
    } catch (const std::bad_alloc&) {
      return {nullptr, SlotFree{bytes}};
    }
  }
  std::span<char> Span(const Slot& s) const {
    return {s.data.get(), static_cast<size_t>(slot_bytes_)};
  }
  void Unpin() noexcept {
    if (!pinned_by_) return;
    for (const auto& s : all_) pinned_by_->Unpin(Span(*s));
    pinned_by_.reset();
  }
  Slot* Take() {  // REQUIRES: mu_ held, a slot free
    Slot* s = free_.back();
    free_.pop_back();
    s->used = 0;
    return s;
  }

  int64_t slot_bytes_;
  std::vector<std::unique_ptr<Slot>> all_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot*> free_;
  std::shared_ptr<DeviceSource> pinned_by_;
};

}  // namespace fmstack::ckpt
