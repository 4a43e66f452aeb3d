#include "ckpt/stream_reader.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace fmstack::ckpt {
namespace {

constexpr int kRing = 4;

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
    std::vector<char> buffer;
    std::unique_ptr<FileReader> reader;  // opened in the first chunk: a failure is that chunk's
    for (size_t c; (c = next.fetch_add(1)) < chunks.size();) {
      {
        const std::lock_guard lock(mu);
        if (c > failed_chunk) return;
      }
      try {
        buffer.resize(static_cast<size_t>(piece_bytes));
        const auto [lo, hi] = chunks[c];
        if (!reader) reader = tier.OpenReader(step, file);
        for (int64_t p = lo; p < hi;) {
          const int64_t n = std::min(hi - p, piece_bytes);
          std::span<char> piece = place ? place(p, n) : std::span<char>();
          if (static_cast<int64_t>(piece.size()) != n)
            piece = std::span(buffer.data(), static_cast<size_t>(n));
          reader->Read(base + p, piece);
          fn(worker, p, piece);
          p += static_cast<int64_t>(piece.size());
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
