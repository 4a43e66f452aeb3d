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

// A buffered reader takes placements this large into the caller's memory;
// smaller ones cost it a system call each for little, and go through its buffer.
constexpr int64_t kMinBufferedPlacement = 4096;

// Bytes [lo, lo + into.size()) of the data region and the memory they are read into.
struct Part {
  int64_t lo = 0;
  std::span<char> into;
};

// How the read of bytes [p, p + n) splits between the caller's memory and
// `buffer` (which stands for [p, p + n)). With a direct reader (`align` >
// 0) only whole aligned blocks of the file whose memory is aligned as well
// go to the caller's memory, so every part is whole blocks (the file's end
// aside) and the read stays one request.
std::vector<Part> PlanRead(int64_t p, int64_t n, int64_t base, int64_t align, const PlaceFn& place,
                           char* buffer) {
  std::vector<Part> parts;
  const auto add = [&](int64_t lo, int64_t hi, char* to) {
    if (hi <= lo) return;
    char* const into = to != nullptr ? to : buffer + (lo - p);
    if (!parts.empty()) {
      Part& last = parts.back();
      if (last.lo + static_cast<int64_t>(last.into.size()) == lo &&
          last.into.data() + last.into.size() == into) {
        last.into = {last.into.data(), last.into.size() + static_cast<size_t>(hi - lo)};
        return;
      }
    }
    parts.push_back({lo, {into, static_cast<size_t>(hi - lo)}});
  };
  for (int64_t pos = p; pos < p + n;) {
    Placement at = place ? place(pos, p + n - pos) : Placement{nullptr, p + n - pos};
    const int64_t end = pos + std::clamp<int64_t>(at.bytes, 1, p + n - pos);
    if (at.to == nullptr) {
      add(pos, end, nullptr);
    } else if (align == 0) {
      add(pos, end, end - pos >= kMinBufferedPlacement ? at.to : nullptr);
    } else {
      const int64_t a = (base + pos + align - 1) / align * align - base;
      const int64_t b = (base + end) / align * align - base;
      char* const first = at.to + (a - pos);
      if (b > a && reinterpret_cast<uintptr_t>(first) % static_cast<uintptr_t>(align) == 0) {
        add(pos, a, nullptr);
        add(a, b, first);
        add(b, end, nullptr);
      } else {
        add(pos, end, nullptr);
      }
    }
    pos = end;
  }
  return parts;
}

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
                          const PlaceFn& place) {
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
          const std::vector<Part> parts =
              PlanRead(p, n, base, static_cast<int64_t>(direct), place, buffer.data());
          std::vector<std::span<char>> into;
          for (const Part& part : parts) into.push_back(part.into);
          reader->ReadV(base + p, into);
          // The caller checks and scatters in pieces that stay in cache.
          for (const Part& part : parts) {
            const auto len = static_cast<int64_t>(part.into.size());
            for (int64_t q = 0; q < len; q += piece_bytes)
              fn(worker, part.lo + q,
                 part.into.subspan(static_cast<size_t>(q),
                                   static_cast<size_t>(std::min(piece_bytes, len - q))));
          }
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
