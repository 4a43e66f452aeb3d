// data: the dedup phases of the pipeline (b and c in pipeline.h).
//
// Phase b, per key partition: the exact keys of every committed shard that
// fall in the partition, sorted; in each group of equal 128-bit hashes all
// but the lowest document key are duplicates. The band keys likewise: the
// documents that share a band key are candidate pairs, written as edges
// (lowest key of the group, other key). A partition holds 1/partitions of
// the keys, so no process holds every signature.
//
// Phase c, once: union-find over the edges (a document per candidate, not
// per signature); each cluster keeps its lowest key. The removed keys,
// sorted, with their reason, are the dedup's whole result.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "data/work_dir.h"

namespace fmstack::data {

struct KeyPair {
  uint64_t a, b;
};

enum class RemovedWhy : uint64_t { kExact = 1, kNear = 2 };
struct RemovedKey {
  uint64_t key;
  RemovedWhy why;
};

// Phase b for one partition; commits work/b/part-NNNN/.
void DedupPartition(const PipelineSpec& spec, const WorkDir& dir, int part);

// Phase c; commits work/removed.bin and returns its counts: documents
// removed as exact and near duplicates, candidate pairs, clusters.
nlohmann::json ClusterDuplicates(const PipelineSpec& spec, const WorkDir& dir);

// The committed result of phase c, sorted by key.
std::vector<RemovedKey> ReadRemoved(const WorkDir& dir);

}  // namespace fmstack::data
