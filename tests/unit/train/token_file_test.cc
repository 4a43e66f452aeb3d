#include "train/token_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "util/error.h"

namespace fmstack::train {
namespace {

std::string ErrorOf(const std::string& path) {
  try {
    TokenFile::Load(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenFile, RoundTrips) {
  const std::string path = ::testing::TempDir() + "/t.bin";
  const std::vector<int32_t> tokens = {0, 5, 65535, 7};
  WriteTokenFile(path, tokens, 65536);
  const TokenFile f = TokenFile::Load(path);
  EXPECT_EQ(f.vocab, 65536);
  EXPECT_EQ(f.tokens, (std::vector<uint16_t>{0, 5, 65535, 7}));
  EXPECT_EQ(std::filesystem::file_size(path), 64u + 8u);
}

TEST(TokenFile, RejectsTruncationCorruptionAndForeignFiles) {
  const std::string path = ::testing::TempDir() + "/c.bin";
  WriteTokenFile(path, std::vector<int32_t>(100, 3), 10);
  std::filesystem::resize_file(path, 64 + 150);
  EXPECT_NE(ErrorOf(path).find("truncated"), std::string::npos) << ErrorOf(path);

  WriteTokenFile(path, std::vector<int32_t>(100, 3), 10);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 10);
    f.put('\x09');
  }
  EXPECT_NE(ErrorOf(path).find("checksum"), std::string::npos) << ErrorOf(path);

  std::ofstream(path) << "hello, this is not a token file at all; it is long enough to read";
  EXPECT_NE(ErrorOf(path).find("FMSTOK01"), std::string::npos) << ErrorOf(path);
  EXPECT_THROW(WriteTokenFile(path, std::vector<int32_t>{1, 10}, 10), Error);
}

TEST(BatchSampler, IsAPureFunctionOfSeedAndStep) {
  std::vector<int32_t> tokens(1000);
  for (int i = 0; i < 1000; ++i) tokens[i] = i % 97;
  const std::string path = ::testing::TempDir() + "/s.bin";
  WriteTokenFile(path, tokens, 97);
  const TokenFile f = TokenFile::Load(path);
  const BatchSampler a(f, 2, 16, 7), b(f, 2, 16, 7), other(f, 2, 16, 8);
  std::vector<int32_t> x1(32), y1(32), x2(32), y2(32);
  a.Train(5, 1, 0, x1, y1);
  b.Train(5, 1, 0, x2, y2);  // a fresh sampler seeks straight to step 5
  EXPECT_EQ(x1, x2);
  EXPECT_EQ(y1, y2);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y1[i], (x1[i] + 1) % 97);  // targets are shifted inputs
  a.Train(6, 1, 0, x2, y2);
  EXPECT_NE(x1, x2);
  other.Train(5, 1, 0, x2, y2);
  EXPECT_NE(x1, x2);
}

}  // namespace
}  // namespace fmstack::train
