// Synthetic training states for the checkpoint tests: fp32 and bf16 tensors
// of many shapes with contents that depend on (seed, name), and the slices
// that rank r of `world` saves or loads under ZeRO-1-like even sharding.
#pragma once

#include <xxhash.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ckpt/engine.h"
#include "util/random.h"

namespace fmstack::ckpt::testing {

struct SyntheticTensor {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

struct SyntheticState {
  std::map<std::string, SyntheticTensor> tensors;
  uint64_t Hash() const {
    uint64_t h = 0;
    for (const auto& [n, t] : tensors) h = XXH3_64bits_withSeed(t.bytes.data(), t.bytes.size(), h);
    return h;
  }
};

inline SyntheticState MakeState(uint64_t seed, int64_t scale = 1) {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"model.wte.weight", {97 * scale, 24}},
      {"model.h.0.attn.c_attn.weight", {72, 24}},
      {"model.h.0.attn.c_attn.bias", {72}},
      {"model.h.0.ln_1.weight", {24}},
      {"model.h.1.mlp.c_fc.weight", {96, 24}},
      {"model.scalar", {1}},
      {"model.odd", {3, 5, 7}},
      {"optim.exp_avg", {1013 * scale}},
      {"optim.exp_avg_sq", {1013 * scale}},
      {"optim.bf16_master", {517, 3}}};
  SyntheticState s;
  Rng rng(seed);
  for (const auto& [name, shape] : shapes) {
    SyntheticTensor t;
    t.dtype =
        name.find("bf16") != std::string::npos || name == "model.odd" ? DType::kBF16 : DType::kF32;
    t.shape = shape;
    t.bytes.resize(static_cast<size_t>(t.elements() * DTypeSize(t.dtype)));
    for (auto& b : t.bytes) b = static_cast<std::byte>(rng.Next() & 0xff);
    s.tensors[name] = std::move(t);
  }
  return s;
}

// Even split of n elements over `world` ranks, the remainder to the first ranks.
inline std::pair<int64_t, int64_t> Range(int64_t n, int rank, int world) {
  const int64_t base = n / world, extra = n % world;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, base + (rank < extra ? 1 : 0)};
}

inline Snapshot SliceFor(const SyntheticState& s, int64_t step, int rank, int world) {
  Snapshot snap;
  snap.counters = {step, step, step * 1000, 7, 0xabcdef + static_cast<uint64_t>(step)};
  snap.layout = {world, 1};
  snap.model = {{"name", "synthetic"}};
  for (const auto& [name, t] : s.tensors) {
    const auto [begin, count] = Range(t.elements(), rank, world);
    const int64_t es = DTypeSize(t.dtype);
    snap.slices.push_back({name, t.dtype, t.shape, begin,
                           std::span(t.bytes).subspan(static_cast<size_t>(begin * es),
                                                      static_cast<size_t>(count * es))});
  }
  return snap;
}

// Buffers for what rank r of `world` loads, and the targets pointing into them.
struct Loaded {
  std::map<std::string, std::vector<std::byte>> parts;
  std::vector<TensorTarget> targets;
};

inline Loaded TargetsFor(const SyntheticState& s, int rank, int world) {
  Loaded l;
  for (const auto& [name, t] : s.tensors) {
    const auto [begin, count] = Range(t.elements(), rank, world);
    auto& buf = l.parts[name];
    buf.assign(static_cast<size_t>(count * DTypeSize(t.dtype)), std::byte{0x5a});
    l.targets.push_back({name, t.dtype, begin, buf});
  }
  return l;
}

// True when the loaded parts of rank r equal the state's bytes.
inline bool Matches(const SyntheticState& s, const Loaded& l, int rank, int world) {
  for (const auto& [name, t] : s.tensors) {
    const auto [begin, count] = Range(t.elements(), rank, world);
    const int64_t es = DTypeSize(t.dtype);
    const auto& got = l.parts.at(name);
    if (std::memcmp(got.data(), t.bytes.data() + begin * es, static_cast<size_t>(count * es)) != 0)
      return false;
  }
  return true;
}

}  // namespace fmstack::ckpt::testing
