// ckpt: reading checkpoints back. Restore picks the newest step that has a
// committed copy, reads it from the fastest tier that holds it, verifies
// every chunk it touches, and falls back copy by copy (then step by step)
// with one log line per rejected copy. Targets name element ranges of the
// global tensors, so the saved world layout never has to match the one
// loading it: any N -> M data-parallel reshard, ZeRO stage changes and
// uneven splits are the same intersection of ranges.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/tier.h"

namespace fmstack::ckpt {

using Log = std::function<void(const std::string&)>;

// Where elements [begin, begin + out.size() / dtype size) of a tensor go.
struct TensorTarget {
  std::string name;
  DType dtype = DType::kF32;
  int64_t begin = 0;
  std::span<std::byte> out;
};

// Chunks of a local file read at once (Tier::local_reads): a drive wants
// several reads in flight, and each reader hashes and scatters its own,
// with no read in flight meanwhile. On the Zen 5 VM, restoring 4 GB with
// O_DIRECT, three runs each: 4 readers 5.3-6.2 GB/s, 8 readers 5.6-7.0.
constexpr int kLocalRestoreReaders = 8;

struct RestoreResult {
  int64_t step = 0;
  int tier = 0;  // index into the tiers given
  std::string tier_name;
  Manifest manifest;
  int64_t bytes_read = 0;
  double seconds = 0;
  std::vector<std::string> rejected;  // one line per copy that was not used
};

// The copy to read and read it; nullopt when no tier holds a usable copy.
// `max_step` limits the search (a run that must not restore past a point).
std::optional<RestoreResult> Restore(std::span<Tier* const> tiers,
                                     std::span<const TensorTarget> targets, const Log& log,
                                     std::optional<int64_t> max_step = std::nullopt);

// Reads one copy; throws Error naming the file and tensor of the first
// problem (missing manifest, bad header, short file, checksum mismatch).
Manifest ReadCopy(Tier& tier, int64_t step, std::span<const TensorTarget> targets,
                  int64_t* bytes_read = nullptr);

Manifest ReadManifest(Tier& tier, int64_t step);

// Full check of one copy: manifest, every shard's safetensors header against
// the manifest, every chunk's checksum. Returns the problems found (empty =
// valid); each names the file and the tensors it holds.
std::vector<std::string> VerifyCopy(Tier& tier, int64_t step);

// Reads one whole tensor of a copy (for export and inspection).
std::vector<std::byte> ReadTensor(Tier& tier, int64_t step, const Manifest& m,
                                  const std::string& name);

}  // namespace fmstack::ckpt
