#include "ckpt/stream_reader.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "util/huge_pages.h"

namespace fmstack::ckpt {
namespace {

constexpr int kRing = 4;
// A reader that bypasses the page cache reads this much at a time: each of
// its reads waits for the disk, with no read-ahead running ahead of it. Its
// buffer (kDirectReadBytes >= 2 MiB) is on huge pages: on the Zen 5 VM four
// threads reading 8 MiB at a time with O_DIRECT ran at 4.9 GB/s (hash and
// copy out included) into a buffer on 2 MiB pages and 1.4-2.2 GB/s into
// one on 4 KiB pages, likely since the virtual disk takes a request's
// memory in physically contiguous segments, a bounded number of them.
constexpr int64_t kDirectReadBytes = int64_t{8} << 20;

struct PieceRef {
  int64_t offset = 0, len = 0;
};

std::vector<PieceRef> Split(std::span<const std::pair<int64_t, int64_t>> spans, int64_t boundary,
                            int64_t piece_bytes) {
  std::vector<PieceRef> out;
  for (const auto& [begin, end] : spans) {
    for (int64_t p = begin; p < end;) {
      const int64_t next_boundary = (p / boundary + 1) * boundary;
      const int64_t e = std::min({end, p + piece_bytes, next_boundary});
      out.push_back({p, e - p});
      p = e;
    }
  }
  return out;
}

}  // namespace

void StreamSpans(Tier& tier, int64_t step, const std::string& file, int64_t base,
                 std::span<const std::pair<int64_t, int64_t>> spans, int64_t boundary,
                 const std::function<void(int64_t, std::span<const char>)>& fn,
                 int64_t piece_bytes) {
  const std::vector<PieceRef> pieces = Split(spans, boundary, piece_bytes);
  if (pieces.empty()) return;
  std::vector<char> ring[kRing];
  for (auto& b : ring) b.resize(static_cast<size_t>(piece_bytes));
  std::mutex mu;
  std::condition_variable cv;
  size_t filled = 0, consumed = 0;  // pieces read / handed to fn
  bool stop = false;
  std::exception_ptr error;
  std::thread reader([&] {
    for (size_t i = 0; i < pieces.size(); ++i) {
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stop || i < consumed + kRing; });
        if (stop) return;
      }
      try {
        tier.Read(step, file, base + pieces[i].offset,
                  std::span<char>(ring[i % kRing].data(), static_cast<size_t>(pieces[i].len)));
      } catch (...) {
        const std::lock_guard lock(mu);
        error = std::current_exception();
        cv.notify_all();
        return;
      }
      {
        const std::lock_guard lock(mu);
        filled = i + 1;
      }
      cv.notify_all();
    }
  });
  auto finish = [&] {
    {
      const std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    reader.join();
  };
  try {
    for (size_t i = 0; i < pieces.size(); ++i) {
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return error || filled > i; });
        if (filled <= i) std::rethrow_exception(error);
      }
      fn(pieces[i].offset,
         std::span<const char>(ring[i % kRing].data(), static_cast<size_t>(pieces[i].len)));
      {
        const std::lock_guard lock(mu);
        consumed = i + 1;
      }
      cv.notify_all();
    }
  } catch (...) {
    finish();
    throw;
  }
  finish();
}

void ReadChunksInParallel(Tier& tier, int64_t step, const std::string& file, int64_t base,
                          std::span<const std::pair<int64_t, int64_t>> chunks, int workers,
                          int64_t piece_bytes,
                          const std::function<void(int, int64_t, std::span<const char>)>& fn,
                          const std::function<std::span<char>(int64_t, int64_t)>& place) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  size_t failed_chunk = chunks.size();  // the earliest chunk that failed
  std::exception_ptr error;
  auto work = [&](int worker) {
    std::vector<char, HugePageAllocator<char>> buffer;
    std::unique_ptr<FileReader> reader;  // opened in the first chunk: a failure is that chunk's
    int64_t read_bytes = piece_bytes;
    size_t direct = 0;  // the reader's alignment for reads past the page cache
    for (size_t c; (c = next.fetch_add(1)) < chunks.size();) {
      {
        const std::lock_guard lock(mu);
        if (c > failed_chunk) return;
      }
      try {
        const auto [lo, hi] = chunks[c];
        if (!reader) {
          reader = tier.OpenReader(step, file);
          direct = reader->direct_alignment();
          if (direct > 0) read_bytes = std::max(piece_bytes, kDirectReadBytes);
          buffer.resize(static_cast<size_t>(read_bytes));
        }
        for (int64_t p = lo; p < hi;) {
          const int64_t n = std::min(hi - p, read_bytes);
          std::span<char> into = place ? place(p, n) : std::span<char>();
          // Memory the disk cannot DMA into takes the buffer and a copy.
          const bool misaligned =
              direct > 0 && reinterpret_cast<uintptr_t>(into.data()) % direct != 0;
          if (static_cast<int64_t>(into.size()) != n || misaligned)
            into = std::span(buffer.data(), static_cast<size_t>(n));
          reader->Read(base + p, into);
          // The caller checks and scatters in pieces that stay in cache.
          for (int64_t q = 0; q < n; q += piece_bytes)
            fn(worker, p + q,
               into.subspan(static_cast<size_t>(q),
                            static_cast<size_t>(std::min(piece_bytes, n - q))));
          p += n;
        }
      } catch (...) {
        const std::lock_guard lock(mu);
        if (c < failed_chunk) {
          failed_chunk = c;
          error = std::current_exception();
        }
        return;
      }
    }
  };
  {
    std::vector<std::jthread> helpers;
    for (int w = 1; w < workers; ++w) helpers.emplace_back(work, w);
    work(0);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace fmstack::ckpt
