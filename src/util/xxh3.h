// util: XXH3-64, the checksum of every checkpoint chunk, peer replica,
// parameter hash and token file, at the speed of the CPU that runs it.
// Debian's libxxhash is built for the x86-64 baseline (SSE2): 15-17 GB/s on
// the Zen 5 VM, where the same source built for AVX2 hashed 47 GB/s and for
// AVX-512 55-66 (1 MiB in cache, scratch program). A 4 GB restore checks
// every byte it reads on two cores, so that was a tenth of its time.
// XXH3 is defined bit for bit, whatever the vector width: each build gives
// the same digest, and this picks the widest one the CPU and the kernel
// allow, once per process.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace fmstack {

// One build of XXH3; the state is opaque storage of kXxh3StateBytes.
struct Xxh3Impl {
  std::string_view name;  // "avx512", "avx2" or "sse2" (or "scalar" off x86)
  uint64_t (*hash)(const void* data, size_t bytes);
  void (*reset)(void* state);
  void (*update)(void* state, const void* data, size_t bytes);
  uint64_t (*digest)(const void* state);
};

inline constexpr size_t kXxh3StateBytes = 640;

// The builds this CPU can run, widest first (tests compare each of them).
std::vector<const Xxh3Impl*> Xxh3Impls();
// The widest of them: what Xxh3 and Xxh3Stream use.
const Xxh3Impl& Xxh3Best();

inline uint64_t Xxh3(const void* data, size_t bytes) {
  return Xxh3Best().hash(data, bytes);
}
template <class T>
uint64_t Xxh3(std::span<T> data) {
  return Xxh3(data.data(), data.size_bytes());
}

// The digest of bytes handed over in pieces: the same as Xxh3 of them all.
class Xxh3Stream {
 public:
  explicit Xxh3Stream(const Xxh3Impl& impl = Xxh3Best()) : impl_(&impl) {
    impl_->reset(state_.data());
  }
  void Reset() { impl_->reset(state_.data()); }
  void Update(const void* data, size_t bytes) { impl_->update(state_.data(), data, bytes); }
  uint64_t Digest() const { return impl_->digest(state_.data()); }

 private:
  const Xxh3Impl* impl_;
  alignas(64) std::array<unsigned char, kXxh3StateBytes> state_{};
};

}  // namespace fmstack
