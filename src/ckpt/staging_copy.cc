#include "ckpt/staging_copy.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace fmstack::ckpt {

void CopyStreaming(char* dst, const std::byte* src, size_t n) {
#if defined(__SSE2__)
  const size_t head = std::min(n, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const auto* s = reinterpret_cast<const __m128i*>(src + i);
    auto* d = reinterpret_cast<__m128i*>(dst + i);
    const __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1);
    const __m128i c = _mm_loadu_si128(s + 2), e = _mm_loadu_si128(s + 3);
    _mm_stream_si128(d, a);
    _mm_stream_si128(d + 1, b);
    _mm_stream_si128(d + 2, c);
    _mm_stream_si128(d + 3, e);
  }
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();
#else
  std::memcpy(dst, src, n);
#endif
}

namespace {

constexpr int64_t kTakeBytes = int64_t{4} << 20;

bool OnDevice(std::span<const char> on_device, size_t i) {
  return i < on_device.size() && on_device[i] != 0;
}

// Bytes [lo, hi) of the concatenated host sources into the slots; source i
// starts at starts[i] in the stream (found by bisection: a save of many
// tensors is copied in many such ranges).
void CopyRange(std::span<const std::span<const std::byte>> sources, std::span<const int64_t> starts,
               std::span<const char> on_device, std::span<char* const> slots, int64_t slot_bytes,
               int64_t lo, int64_t hi) {
  const auto first = std::upper_bound(starts.begin(), starts.end(), lo) - starts.begin() - 1;
  for (size_t i = static_cast<size_t>(std::max<ptrdiff_t>(0, first)); i < sources.size(); ++i) {
    const std::span<const std::byte> src = sources[i];
    const int64_t at = starts[i];
    const int64_t end = at + static_cast<int64_t>(src.size());
    if (at >= hi) return;
    for (int64_t p = std::max(at, lo); p < std::min(end, hi) && !OnDevice(on_device, i);) {
      const int64_t slot = p / slot_bytes;
      const int64_t n = std::min({end, hi, (slot + 1) * slot_bytes}) - p;
      CopyStreaming(slots[static_cast<size_t>(slot)] + (p - slot * slot_bytes),
                    src.data() + (p - at), static_cast<size_t>(n));
      p += n;
    }
  }
}

}  // namespace

void CopyToSlots(std::span<const std::span<const std::byte>> sources, std::span<char* const> slots,
                 int64_t slot_bytes, int threads, std::span<const char> on_device) {
  std::vector<int64_t> starts;
  int64_t total = 0;
  for (const auto& s : sources) {
    starts.push_back(total);
    total += static_cast<int64_t>(s.size());
  }
  const int64_t n_slots = static_cast<int64_t>(slots.size());
  // Each take is a run of slots of at least kTakeBytes, so that small
  // slots do not make the counter the bottleneck.
  const int64_t per_take = std::max<int64_t>(1, kTakeBytes / std::max<int64_t>(1, slot_bytes));
  const int64_t workers = std::clamp<int64_t>(threads, 1, std::max<int64_t>(1, n_slots));
  std::atomic<int64_t> next{0};
  const auto work = [&] {
    for (int64_t first; (first = next.fetch_add(per_take)) < n_slots;) {
      const int64_t last = std::min(n_slots, first + per_take);
      CopyRange(sources, starts, on_device, slots, slot_bytes, std::min(total, first * slot_bytes),
                std::min(total, last * slot_bytes));
    }
  };
  std::vector<std::jthread> helpers;
  for (int64_t w = 1; w < workers; ++w) helpers.emplace_back(work);
  work();
}

std::vector<DeviceSource::Copy> PlanDeviceCopies(
    std::span<const std::span<const std::byte>> sources, std::span<const char> on_device,
    std::span<char* const> slots, int64_t slot_bytes) {
  std::vector<DeviceSource::Copy> copies;
  int64_t last_slot = -1;  // copies never merge across slots, even adjacent ones:
                           // each slot is pinned on its own
  int64_t at = 0;          // where the current source starts in the stream
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::span<const std::byte> src = sources[i];
    const int64_t end = at + static_cast<int64_t>(src.size());
    for (int64_t p = at; p < end && OnDevice(on_device, i);) {
      const int64_t slot = p / slot_bytes;
      const int64_t n = std::min(end, (slot + 1) * slot_bytes) - p;
      char* to = slots[static_cast<size_t>(slot)] + (p - slot * slot_bytes);
      const std::byte* from = src.data() + (p - at);
      DeviceSource::Copy* last = copies.empty() ? nullptr : &copies.back();
      if (last != nullptr && slot == last_slot && last->to + last->bytes == to &&
          last->from + last->bytes == from) {
        last->bytes += static_cast<size_t>(n);
      } else {
        copies.push_back({to, from, static_cast<size_t>(n)});
      }
      last_slot = slot;
      p += n;
    }
    at = end;
  }
  return copies;
}

}  // namespace fmstack::ckpt
