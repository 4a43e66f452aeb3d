// The POSIX tier's sink: queued writes land in order, a buffer is reported
// done only once its bytes are written, and a failed write is an error that
// leaves nothing in flight.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "ckpt/tier.h"
#include "util/error.h"

namespace fmstack::ckpt {
namespace {

namespace fs = std::filesystem;

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using Aligned = std::unique_ptr<char, FreeDeleter>;

Aligned AlignedBuffer(size_t bytes) {
  Aligned buffer(static_cast<char*>(std::aligned_alloc(4096, bytes)));
  if (!buffer) throw std::bad_alloc();
  return buffer;
}

class PosixSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    root_ = fs::temp_directory_path() / fmt::format("fmstack-sink-{}-{}", ::getpid(), name);
    fs::remove_all(root_);
    tier_ = MakePosixTier("local", root_.string());
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string ReadBack(const std::string& file) const {
    std::ifstream in(tier_->Where(1, file), std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  fs::path root_;
  std::unique_ptr<Tier> tier_;
};

// Every buffer is scribbled over as soon as the sink reports it done, as
// the engine hands its slot back to the pool. A report that came before
// the write would put the scribble in the file.
TEST_F(PosixSinkTest, QueuedBuffersAreReportedOnlyOnceWritten) {
  constexpr size_t kBuffers = 48, kBytes = 1 << 20;
  std::vector<Aligned> buffers;
  std::string expected;
  for (size_t b = 0; b < kBuffers; ++b) {
    buffers.push_back(AlignedBuffer(kBytes));
    for (size_t i = 0; i < kBytes; ++i)
      buffers[b].get()[i] = static_cast<char>((b * 131 + i) % 251);
    expected.append(buffers[b].get(), kBytes);
  }
  // A header of whole blocks, as the engine's (padded) is; then aligned
  // buffers, queued; then a tail that is not a whole block, which waits for
  // them and goes out through the bounce buffer.
  const std::string header(4096, 'h'), tail = "a tail that is not a whole block";
  expected = header + expected + tail;
  std::unique_ptr<Sink> sink = tier_->Create(1, "queued.bin");
  sink->Write(header);
  size_t reported = 0;
  const auto scribble = [&](size_t n) {
    ASSERT_LE(reported + n, kBuffers) << "more buffers reported done than were queued";
    for (; n > 0; --n) std::memset(buffers[reported++].get(), 0x5a, kBytes);
  };
  for (size_t b = 0; b < kBuffers; ++b) {
    const size_t done = sink->Queue({buffers[b].get(), kBytes});
    ASSERT_LE(reported + done, b + 1);
    scribble(done);
  }
  const size_t before_tail = sink->Queue(tail);
  ASSERT_EQ(reported + before_tail, kBuffers + 1) << "the tail went out before the queued writes";
  scribble(before_tail - 1);
  EXPECT_EQ(sink->Drain(), 0u);
  sink->Finish();
  const std::string got = ReadBack("queued.bin");
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected) << "the file differs from what was queued";
}

// A buffer in parts from several places: aligned parts go out as one
// queued write, in order, reported once; a buffer with a part that is not
// whole blocks waits for the queue and is written part by part.
TEST_F(PosixSinkTest, PartsOfAQueuedBufferLandInOrder) {
  const std::vector<size_t> sizes = {8192, 4096, 12288, 4096};
  std::vector<Aligned> buffers;
  for (size_t b = 0; b < sizes.size(); ++b) {
    buffers.push_back(AlignedBuffer(sizes[b]));
    std::memset(buffers.back().get(), static_cast<int>('a' + b), sizes[b]);
  }
  const std::string header(4096, 'h'), tail = "a tail that is not a whole block";
  std::unique_ptr<Sink> sink = tier_->Create(1, "parts.bin");
  sink->Write(header);
  const std::vector<std::span<const char>> first = {
      {buffers[0].get(), sizes[0]}, {buffers[1].get(), sizes[1]}, {buffers[2].get(), sizes[2]}};
  const size_t done_first = sink->QueueV(first);
  EXPECT_LE(done_first, 1u);
  const std::vector<std::span<const char>> second = {{buffers[3].get(), sizes[3]}, tail};
  EXPECT_EQ(done_first + sink->QueueV(second), 2u) << "each buffer in parts counts once";
  EXPECT_EQ(sink->Drain(), 0u);
  sink->Finish();
  std::string expected = header;
  for (size_t b = 0; b < sizes.size(); ++b) expected.append(buffers[b].get(), sizes[b]);
  expected += tail;
  EXPECT_TRUE(ReadBack("parts.bin") == expected) << "the file differs from the parts";
}

// A file size limit makes a queued write fail (EFBIG) partway, the way a
// full disk would: the error names the file, and nothing is left in flight.
TEST_F(PosixSinkTest, AFailedQueuedWriteIsAnErrorNamingTheFile) {
  constexpr size_t kBytes = 1 << 20;
  std::vector<Aligned> buffers;
  for (int b = 0; b < 8; ++b) {
    buffers.push_back(AlignedBuffer(kBytes));
    std::memset(buffers.back().get(), 'x', kBytes);
  }
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit limit = old;
  limit.rlim_cur = 3 * kBytes + kBytes / 2;
  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &previous), 0);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  std::string error;
  {
    std::unique_ptr<Sink> sink = tier_->Create(1, "full.bin");
    try {
      for (const Aligned& b : buffers) sink->Queue({b.get(), kBytes});
      sink->Drain();
      sink->Finish();
    } catch (const Error& e) {
      error = e.what();
    }
  }  // an unfinished sink removes its file
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::sigaction(SIGXFSZ, &previous, nullptr);
  EXPECT_NE(error.find(tier_->Where(1, "full.bin")), std::string::npos) << error;
  EXPECT_NE(error.find("write of"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(tier_->Where(1, "full.bin")));
}

}  // namespace
}  // namespace fmstack::ckpt
