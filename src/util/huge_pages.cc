#include "util/huge_pages.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <new>
#include <string_view>

#include "util/units.h"

namespace fmstack {
namespace {

// To a whole number of huge pages (an address: to the next boundary).
uintptr_t RoundUp(uintptr_t x) {
  return (x + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

}  // namespace

// mmap aligns to 4 KiB only: map one huge page more than asked, then return
// the unaligned head and the tail, so that every 2 MiB of the region can be
// one huge page.
void* MapHugePages(size_t bytes) {
  const size_t size = RoundUp(bytes);
  void* raw = ::mmap(nullptr, size + kHugePageBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    throw AllocationError(fmt::format("mapping {} failed: {}",
                                      units::FormatBytes(static_cast<double>(size)),
                                      std::strerror(errno)));
  }
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = RoundUp(start);
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = start + size + kHugePageBytes;
  if (end > aligned + size) ::munmap(reinterpret_cast<void*>(aligned + size), end - aligned - size);
  void* p = reinterpret_cast<void*>(aligned);
  // A hint: EINVAL on a kernel without THP leaves ordinary pages, which work.
  (void)::madvise(p, size, MADV_HUGEPAGE);
  return p;
}

HugeFloats NamedFloats(std::string_view what, size_t n, float value) {
  try {
    return HugeFloats(n, value);
  } catch (const std::bad_alloc& e) {
    throw AllocationError(fmt::format("{}: {} ({} floats) could not be allocated ({})", what,
                                      units::FormatBytes(4.0 * static_cast<double>(n)), n,
                                      e.what()));
  }
}

void UnmapHugePages(void* p, size_t bytes) noexcept {
  ::munmap(p, RoundUp(bytes));
}

int64_t ProcessHugePageBytes() {
  std::ifstream in("/proc/self/smaps_rollup");
  for (std::string line; std::getline(in, line);) {
    constexpr std::string_view kKey = "AnonHugePages:";
    if (!line.starts_with(kKey)) continue;
    try {
      return std::stoll(line.substr(kKey.size())) * 1024;  // "  2048 kB"
    } catch (const std::exception&) {
      return -1;
    }
  }
  return -1;
}

std::string HugePagesMode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(in, line)) return "unavailable";
  const size_t open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "unavailable";
  return line.substr(open + 1, close - open - 1);
}

}  // namespace fmstack
