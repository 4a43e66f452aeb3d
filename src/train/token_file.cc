#include "train/token_file.h"

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <fstream>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/random.h"
#include "util/xxh3.h"

namespace fmstack::train {
namespace {

constexpr char kMagic[8] = {'F', 'M', 'S', 'T', 'O', 'K', '0', '1'};
constexpr uint32_t kHeaderSize = 64;

template <typename T>
void Put(std::array<char, kHeaderSize>& h, size_t at, T value) {
  std::memcpy(h.data() + at, &value, sizeof(T));
}
template <typename T>
T Get(const std::array<char, kHeaderSize>& h, size_t at) {
  T value;
  std::memcpy(&value, h.data() + at, sizeof(T));
  return value;
}

}  // namespace

void WriteTokenFile(const std::string& path, std::span<const int32_t> tokens, int64_t vocab) {
  std::vector<uint16_t> body(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      throw Error(fmt::format("{}: token {} at {} is outside the vocabulary [0, {})", path,
                              tokens[i], i, vocab));
    }
    body[i] = static_cast<uint16_t>(tokens[i]);
  }
  std::array<char, kHeaderSize> header{};
  std::memcpy(header.data(), kMagic, sizeof(kMagic));
  Put<uint32_t>(header, 8, kHeaderSize);
  Put<uint32_t>(header, 12, static_cast<uint32_t>(vocab));
  Put<uint64_t>(header, 16, body.size());
  Put<uint64_t>(header, 24, Xxh3(std::span(body)));

  AtomicFileWriter w(path);
  w.Write(header.data(), header.size());
  w.Write(body.data(), body.size() * sizeof(uint16_t));
  w.Commit();
}

int64_t TokenFileVocab(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(fmt::format("{}: cannot open the token file", path));
  std::array<char, kHeaderSize> header{};
  if (!f.read(header.data(), header.size()) || std::memcmp(header.data(), kMagic, 8) != 0 ||
      Get<uint32_t>(header, 8) != kHeaderSize) {
    throw Error(
        fmt::format("{}: not a token file (expected magic \"FMSTOK01\" in a {}-byte header)", path,
                    kHeaderSize));
  }
  return Get<uint32_t>(header, 12);
}

TokenFile TokenFile::Load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(fmt::format("{}: cannot open the token file", path));
  std::array<char, kHeaderSize> header{};
  if (!f.read(header.data(), header.size()) || std::memcmp(header.data(), kMagic, 8) != 0) {
    throw Error(
        fmt::format("{}: not a token file (expected magic \"FMSTOK01\" in a {}-byte header)", path,
                    kHeaderSize));
  }
  if (Get<uint32_t>(header, 8) != kHeaderSize) {
    throw Error(fmt::format("{}: header size {} (expected {})", path, Get<uint32_t>(header, 8),
                            kHeaderSize));
  }
  TokenFile t;
  t.path = path;
  t.vocab = Get<uint32_t>(header, 12);
  const uint64_t count = Get<uint64_t>(header, 16);
  t.tokens.resize(count);
  f.read(reinterpret_cast<char*>(t.tokens.data()), static_cast<std::streamsize>(count * 2));
  if (static_cast<uint64_t>(f.gcount()) != count * 2) {
    throw Error(fmt::format("{}: truncated: header says {} tokens ({} bytes), body has {} bytes",
                            path, count, count * 2, f.gcount()));
  }
  if (Xxh3(t.tokens.data(), count * 2) != Get<uint64_t>(header, 24)) {
    throw Error(fmt::format("{}: checksum mismatch: the token data is corrupt", path));
  }
  for (size_t i = 0; i < t.tokens.size(); ++i) {
    if (t.tokens[i] >= t.vocab) {
      throw Error(fmt::format("{}: token {} at {} is outside the vocabulary [0, {})", path,
                              t.tokens[i], i, t.vocab));
    }
  }
  return t;
}

BatchSampler::BatchSampler(const TokenFile& file, int64_t B, int64_t T, uint64_t seed)
    : file_(&file), B_(B), T_(T), seed_(seed) {
  if (static_cast<int64_t>(file.tokens.size()) < T + 1) {
    throw Error(fmt::format("{}: {} tokens cannot fill one sequence of {} (+1 target)", file.path,
                            file.tokens.size(), T));
  }
}

void BatchSampler::Window(int64_t start, int64_t row, std::span<int32_t> inputs,
                          std::span<int32_t> targets) const {
  for (int64_t t = 0; t < T_; ++t) {
    inputs[row * T_ + t] = file_->tokens[start + t];
    targets[row * T_ + t] = file_->tokens[start + t + 1];
  }
}

void BatchSampler::Train(int64_t step, int64_t micro, int64_t rank, std::span<int32_t> inputs,
                         std::span<int32_t> targets) const {
  const auto starts = static_cast<uint64_t>(file_->tokens.size()) - static_cast<uint64_t>(T_);
  for (int64_t b = 0; b < B_; ++b) {
    const uint64_t h = HashWords({seed_, static_cast<uint64_t>(step), static_cast<uint64_t>(micro),
                                  static_cast<uint64_t>(rank), static_cast<uint64_t>(b)});
    Window(static_cast<int64_t>(h % starts), b, inputs, targets);
  }
}

void BatchSampler::Eval(int64_t i, int64_t n, std::span<int32_t> inputs,
                        std::span<int32_t> targets) const {
  const int64_t starts = static_cast<int64_t>(file_->tokens.size()) - T_;
  const int64_t windows = n * B_;
  for (int64_t b = 0; b < B_; ++b) {
    Window((i * B_ + b) * starts / windows, b, inputs, targets);
  }
}

}  // namespace fmstack::train
