// util: an allocator for large, long-lived buffers (the trainer's
// parameters, gradients, activations and optimizer moments, its peer
// replicas, the checkpoint engine's staging slots) that asks for
// transparent huge pages. Debian's kernels default to THP "madvise": memory is in 4 KiB
// pages unless a region asks. OpenBLAS's packing routines walk a matrix row
// after row, kilobytes apart, and a 4 KiB page holds one row's slice: on
// gpt-mini's products over fresh memory, sgemm ran at 214.8-221.9 GFLOP/s
// (median of 40) on 4 KiB pages and 223.3-228.2 on 2 MiB pages (the Intel
// VM; docs/trainer.md has the microbenchmark).
//
// A region of at least 2 MiB is mapped 2 MiB-aligned and advised
// MADV_HUGEPAGE; smaller ones come from operator new. The advice is a hint:
// where THP is "never" the memory is ordinary pages, and HugePagesMode says
// so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fmstack {

// An allocation that failed, saying what and how much (main prints it with
// the memory available): a std::bad_alloc for code that catches those.
class AllocationError : public std::bad_alloc {
 public:
  explicit AllocationError(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

// The region of `bytes` (>= kHugePageBytes) mapped and advised; throws
// AllocationError naming the size when the mapping fails. Release with
// UnmapHugePages.
void* MapHugePages(size_t bytes);
void UnmapHugePages(void* p, size_t bytes) noexcept;

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  // Implicit: allocator rebinding converts between element types.
  HugePageAllocator(const HugePageAllocator<U>& /*other*/) noexcept {}  // NOLINT

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes >= kHugePageBytes) return static_cast<T*>(MapHugePages(bytes));
    return static_cast<T*>(::operator new (bytes, std::align_val_t{64}));
  }
  void deallocate(T* p, size_t n) noexcept {
    const size_t bytes = n * sizeof(T);
    if (bytes >= kHugePageBytes) {
      UnmapHugePages(p, bytes);
    } else {
      ::operator delete (p, std::align_val_t{64});
    }
  }
  friend bool operator==(const HugePageAllocator&, const HugePageAllocator&) { return true; }
};

// A float buffer on huge pages where it is large enough.
using HugeFloats = std::vector<float, HugePageAllocator<float>>;

// `n` floats of `value`; a failed allocation is an AllocationError that
// names `what` ("the model's parameters") and the bytes.
HugeFloats NamedFloats(std::string_view what, size_t n, float value = 0.0f);

// This process's anonymous memory on huge pages now, in bytes
// (AnonHugePages of /proc/self/smaps_rollup), or -1 where the kernel does
// not say: what a caller checks to learn whether the advice was taken.
int64_t ProcessHugePageBytes();

// The kernel's THP setting, "always", "madvise" or "never" (the bracketed
// word of /sys/kernel/mm/transparent_hugepage/enabled), or "unavailable".
std::string HugePagesMode();

}  // namespace fmstack
