// How fast this machine copies by the distance, within a page, from source
// to destination: the kernel copies socket bytes with `rep movsb` (x86 with
// FSRM), and on AMD Zen 3/4 one distance costs a tenth of the speed. The TCP
// mesh pads its frames (comm/tcp_mesh.h) so that message bytes keep their
// buffers' alignment in the stream instead of walking through that distance
// with every 8-byte header. Ratios (in brackets) are against distance 0 in
// the same run.
//
//   bench_copy_alignment [--rounds 3]
#include <fmt/format.h>
#include <gnu/libc-version.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/median.h"
#include "util/text_table.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kPage = 4096;
constexpr size_t kPiece = 32 * 1024;  // about what one kernel copy moves

void RepMovsb(std::byte* dst, const std::byte* src, size_t n) {
#if defined(__x86_64__)
  asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
#else
  std::memcpy(dst, src, n);
#endif
}

struct Buffers {
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> src, dst;
  size_t bytes;
  explicit Buffers(size_t n)
      : src(static_cast<std::byte*>(std::aligned_alloc(kPage, n + 2 * kPage))),
        dst(static_cast<std::byte*>(std::aligned_alloc(kPage, n + 2 * kPage))),
        bytes(n) {
    if (!src || !dst) throw std::bad_alloc();
    std::memset(src.get(), 1, n + 2 * kPage);
    std::memset(dst.get(), 2, n + 2 * kPage);
  }
};

// GB/s of copying `b.bytes` in kPiece pieces from page offset 64 to page
// offset 64 + distance, the median of `rounds`.
template <typename Copy>
double Rate(Buffers& b, size_t distance, int rounds, Copy copy) {
  const size_t src_off = 64, dst_off = kPage + 64 + distance;
  const size_t passes = std::max<size_t>(4, (size_t{256} << 20) / b.bytes);
  std::vector<double> rates;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    for (size_t p = 0; p < passes; ++p) {
      for (size_t at = 0; at + kPiece <= b.bytes; at += kPiece) {
        copy(b.dst.get() + dst_off + at, b.src.get() + src_off + at, kPiece);
      }
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(static_cast<double>(passes * (b.bytes / kPiece * kPiece)) / s / 1e9);
  }
  return fmstack::bench::Median(rates);
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"copy speed by the distance from source to destination within a page"};
  int rounds = 3;
  app.add_option("--rounds", rounds, "rounds per cell; the median is shown")
      ->check(CLI::Range(1, 99));
  CLI11_PARSE(app, argc, argv);

  std::printf("cpu: %s; glibc %s; copies of %zu KiB pieces, median of %d\n", CpuModel().c_str(),
              gnu_get_libc_version(), kPiece / 1024, rounds);
  Buffers cached(256 * 1024), memory(size_t{16} << 20);
  const size_t distances[] = {0, 8, 16, 24, 32, 40, 48, 56, 64, 128, 2048, kPage - 8};
  const auto memcpy_fn = [](std::byte* d, const std::byte* s, size_t n) { std::memcpy(d, s, n); };
  using Align = fmstack::TextTable::Align;
  fmstack::TextTable table(
      {"distance (bytes)", "rep movsb, 256 KiB", "rep movsb, 16 MiB", "memcpy, 256 KiB",
       "memcpy, 16 MiB"},
      {Align::kRight, Align::kRight, Align::kRight, Align::kRight, Align::kRight});
  double base[4] = {};
  for (const size_t d : distances) {
    const double rates[4] = {Rate(cached, d, rounds, RepMovsb), Rate(memory, d, rounds, RepMovsb),
                             Rate(cached, d, rounds, memcpy_fn),
                             Rate(memory, d, rounds, memcpy_fn)};
    std::vector<std::string> row = {std::to_string(d)};
    for (int k = 0; k < 4; ++k) {
      if (d == 0) base[k] = rates[k];
      row.push_back(fmt::format("{:.1f} GB/s ({:.2f}x)", rates[k], rates[k] / base[k]));
    }
    table.AddRow(std::move(row));
  }
  std::printf("\n%s", table.RenderText().c_str());
  return 0;
}
