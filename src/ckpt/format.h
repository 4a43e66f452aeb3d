// ckpt: the on-disk format of one checkpoint, shared by every tier.
//
//   step-00001200/
//     rank-00000.safetensors   one shard file per rank, a valid safetensors file
//     rank-00000.index.json    that rank's part of the manifest (written before it)
//     manifest.json            the merged index: layout, tensors, checksums, counters
//     COMMITTED                written last, after everything above is durable
//
// A tensor is a flat run of elements with a global shape; a rank saves any
// number of pieces of it, each a contiguous element range [begin, begin+count).
// That one notion covers replicated tensors (one piece, the whole tensor),
// ZeRO shards (uneven ranges) and any reshard on load (intersect ranges).
//
// Checksums are XXH3-64 over fixed chunks of each shard file's data region
// (`chunk_bytes`, at most 64 MiB): the writer hashes exactly the staging
// slots it writes, and a reader verifies every chunk it touches.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fmstack::ckpt {

enum class DType { kF32, kBF16, kF16, kI64, kI32, kU8 };
const char* DTypeName(DType t);  // safetensors spelling: "F32", "BF16" ...
int64_t DTypeSize(DType t);
// Throws Error naming `where` when `name` is not a known dtype.
DType ParseDType(const std::string& name, const std::string& where);

constexpr int64_t kMaxChunkBytes = 64 << 20;
constexpr int64_t kDefaultChunkBytes = 8 << 20;
constexpr int kFormatVersion = 1;

// One saved piece of a tensor, inside one shard file.
struct Piece {
  std::string file;    // "rank-00001.safetensors"
  int64_t begin = 0;   // first element in the flat global tensor
  int64_t count = 0;   // elements
  int64_t offset = 0;  // bytes from the start of the file's data region
};

struct TensorEntry {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // global
  std::vector<Piece> pieces;   // sorted by begin; together they cover the tensor
  int64_t elements() const;
};

struct FileEntry {
  int rank = 0;
  int64_t size = 0;         // whole file, bytes
  int64_t data_offset = 0;  // where the safetensors data region starts
  int64_t chunk_bytes = kDefaultChunkBytes;
  std::vector<uint64_t> checksums;  // XXH3-64 per chunk of the data region
};

// What the trainer needs besides tensors to continue exactly.
struct Counters {
  int64_t step = 0;            // the checkpoint's step (directory name)
  int64_t optimizer_step = 0;  // AdamW's bias-correction step
  int64_t data_position = 0;   // tokens consumed
  uint64_t seed = 0;
  uint64_t rng = 0;  // the trainer's generator state
};

struct Layout {
  int world = 1;       // data-parallel ranks that saved
  int zero_stage = 0;  // 0 = DDP, 1/2 = optimizer (and gradient) sharding
};

struct Manifest {
  Counters counters;
  Layout layout;
  std::string fmstack_version;
  nlohmann::json model;  // free-form: the model shape, for `ckpt inspect` and export
  std::map<std::string, TensorEntry> tensors;
  std::map<std::string, FileEntry> files;

  // With "xxh3": the XXH3-64 of its own canonical text without that key.
  nlohmann::json ToJson() const;
  // Checks the checksum first; throws Error naming `where` (a file or
  // object) and the bad key.
  static Manifest FromJson(const nlohmann::json& j, const std::string& where);
  // Throws Error when pieces overlap, leave a gap, or point outside their file.
  void Validate(const std::string& where) const;
  // The tensor names whose pieces overlap bytes [lo, hi) of a file's data region.
  std::vector<std::string> TensorsAt(const std::string& file, int64_t lo, int64_t hi) const;
};

// Index of one rank: its file and its pieces, merged into the manifest by rank 0.
nlohmann::json RankIndexJson(const std::string& file, const FileEntry& entry,
                             const std::map<std::string, TensorEntry>& pieces);
void MergeRankIndex(const nlohmann::json& index, const std::string& where, Manifest& into);

// The safetensors header of a shard: 8-byte little-endian length, then JSON
// naming each piece ("name" for a whole tensor, "name@begin+count" for a part)
// with its dtype, shape and data_offsets, padded with spaces so that the data
// region starts on a kShardAlign boundary (aligned I/O).
//
// Safetensors allows no holes in the data region, so the writer's padding
// between pieces (a run of memory starts at the offset that agrees with its
// address modulo kShardAlign: O_DIRECT with no copy, both ways) is itself an
// entry: "__pad.<n>", U8 of zeros. The manifest does not list them; any
// safetensors reader sees them as small tensors of that reserved name.
constexpr int64_t kShardAlign = 4096;
inline constexpr std::string_view kPadTensorPrefix = "__pad.";
std::string PadTensorName(int64_t n);  // "__pad.3"
bool IsPadTensorName(std::string_view name);
struct ShardPiece {
  std::string tensor;
  DType dtype = DType::kF32;
  std::vector<int64_t> global_shape;
  int64_t begin = 0, count = 0;
};
std::string SafetensorsHeader(const std::vector<ShardPiece>& pieces);

// Parsed header of a safetensors file: name -> (dtype, shape, [begin, end)).
struct SafetensorsEntry {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // bytes within the data region
};
struct SafetensorsIndex {
  int64_t data_offset = 0;
  std::map<std::string, SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
};
// `prefix` holds at least the first 8 + header bytes of the file. Checks
// every entry: a known dtype, shape x dtype = its byte length, offsets in
// bounds (within `data_bytes` when >= 0) and no two entries overlapping.
SafetensorsIndex ParseSafetensorsHeader(std::string_view prefix, const std::string& where,
                                        int64_t data_bytes = -1);
// Throws Error naming `where` unless the shard's header agrees with the
// manifest: the same data offset, and for each of the file's pieces an entry
// with its dtype and byte range.
void CheckShardHeader(const SafetensorsIndex& header, const Manifest& m, const std::string& file,
                      const std::string& where);
// Bytes needed to parse the header, from the first 8 bytes.
int64_t SafetensorsHeaderBytes(std::string_view first8, const std::string& where);

std::string StepDirName(int64_t step);  // "step-00001200"
std::optional<int64_t> ParseStepDirName(const std::string& name);
std::string RankFileName(int rank);          // "rank-00003.safetensors"
bool IsRankFileName(std::string_view name);  // a name RankFileName gives
std::string RankIndexName(int rank);         // "rank-00003.index.json"
// A name the engine writes into a step directory (shards, indexes, the
// manifest, COMMITTED, and their in-flight .tmp twins): the engine removes
// only step directories that hold nothing else.
bool IsEngineFileName(std::string_view name);
inline constexpr const char* kManifestName = "manifest.json";
// The largest manifest.json read (every rank parses it whole).
inline constexpr int64_t kMaxManifestBytes = int64_t{64} << 20;
inline constexpr const char* kCommittedName = "COMMITTED";

}  // namespace fmstack::ckpt
