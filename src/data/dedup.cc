#include "data/dedup.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <unordered_map>

#include "data/shard_stages.h"
#include "util/atomic_file.h"

namespace fmstack::data {
namespace {

namespace fs = std::filesystem;

// Union-find with path halving; parents are indices into `keys`.
class Clusters {
 public:
  size_t Id(uint64_t key) {
    auto [it, fresh] = index_.try_emplace(key, keys_.size());
    if (fresh) {
      keys_.push_back(key);
      parent_.push_back(it->second);
    }
    return it->second;
  }
  size_t Find(size_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  void Join(uint64_t a, uint64_t b) {
    size_t x = Find(Id(a)), y = Find(Id(b));
    if (x == y) return;
    if (keys_[y] < keys_[x]) std::swap(x, y);
    parent_[y] = x;  // the root is the cluster's lowest key
  }
  size_t size() const { return keys_.size(); }
  uint64_t key(size_t i) const { return keys_[i]; }

 private:
  std::unordered_map<uint64_t, size_t> index_;
  std::vector<uint64_t> keys_;
  std::vector<size_t> parent_;
};

}  // namespace

void DedupPartition(const PipelineSpec& spec, const WorkDir& dir, int part) {
  const int shards = static_cast<int>(spec.inputs.size());
  std::vector<ExactKey> exact;
  std::vector<BandKey> bands;
  for (int s = 0; s < shards; ++s) {
    const std::string base = dir.ShardA(s);
    if (!dir.Committed('a', s)) throw Error(fmt::format("{}: not committed", base));
    if (spec.Find("exact-dedup")) {
      std::vector<ExactKey> e =
          ReadRecords<ExactKey>(fmt::format("{}/exact-{:04}.bin", base, part));
      exact.insert(exact.end(), e.begin(), e.end());
    }
    if (spec.Find("minhash-dedup")) {
      std::vector<BandKey> b = ReadRecords<BandKey>(fmt::format("{}/bands-{:04}.bin", base, part));
      bands.insert(bands.end(), b.begin(), b.end());
    }
  }
  std::sort(exact.begin(), exact.end(), [](const ExactKey& x, const ExactKey& y) {
    return std::tie(x.h1, x.h2, x.doc) < std::tie(y.h1, y.h2, y.doc);
  });
  std::vector<uint64_t> duplicates;
  for (size_t i = 1; i < exact.size(); ++i) {
    if (exact[i].h1 == exact[i - 1].h1 && exact[i].h2 == exact[i - 1].h2)
      duplicates.push_back(exact[i].doc);
  }
  std::sort(bands.begin(), bands.end(), [](const BandKey& x, const BandKey& y) {
    return std::tie(x.band, x.doc) < std::tie(y.band, y.doc);
  });
  std::vector<KeyPair> edges;
  for (size_t i = 0; i < bands.size();) {
    size_t j = i + 1;
    while (j < bands.size() && bands[j].band == bands[i].band) {
      if (bands[j].doc != bands[j - 1].doc) edges.push_back({bands[i].doc, bands[j].doc});
      ++j;
    }
    i = j;
  }
  std::sort(edges.begin(), edges.end(), [](const KeyPair& x, const KeyPair& y) {
    return std::tie(x.a, x.b) < std::tie(y.a, y.b);
  });
  edges.erase(
      std::unique(edges.begin(), edges.end(),
                  [](const KeyPair& x, const KeyPair& y) { return x.a == y.a && x.b == y.b; }),
      edges.end());
  DirCommit out(dir.PartB(part));
  WriteRecords(out, "exact.bin", duplicates);
  WriteRecords(out, "edges.bin", edges);
  out.Write("stats.json", nlohmann::json{{"exact_keys", exact.size()},
                                         {"band_keys", bands.size()},
                                         {"exact_duplicates", duplicates.size()},
                                         {"candidate_pairs", edges.size()}}
                              .dump());
  out.Commit();
}

nlohmann::json ClusterDuplicates(const PipelineSpec& spec, const WorkDir& dir) {
  std::vector<uint64_t> exact;
  Clusters clusters;
  int64_t pairs = 0;
  for (int p = 0; p < spec.partitions; ++p) {
    const std::string base = dir.PartB(p);
    if (!dir.Committed('b', p)) throw Error(fmt::format("{}: not committed", base));
    std::vector<uint64_t> e = ReadRecords<uint64_t>(base + "/exact.bin");
    exact.insert(exact.end(), e.begin(), e.end());
    for (const KeyPair& k : ReadRecords<KeyPair>(base + "/edges.bin")) {
      clusters.Join(k.a, k.b);
      ++pairs;
    }
  }
  std::sort(exact.begin(), exact.end());
  exact.erase(std::unique(exact.begin(), exact.end()), exact.end());
  std::vector<RemovedKey> removed;
  for (const uint64_t k : exact) removed.push_back({k, RemovedWhy::kExact});
  int64_t near = 0, clustered = 0;
  for (size_t i = 0; i < clusters.size(); ++i) {
    const size_t root = clusters.Find(i);
    if (root == i) {
      ++clustered;
      continue;
    }
    if (std::binary_search(exact.begin(), exact.end(), clusters.key(i))) continue;
    removed.push_back({clusters.key(i), RemovedWhy::kNear});
    ++near;
  }
  std::sort(removed.begin(), removed.end(),
            [](const RemovedKey& x, const RemovedKey& y) { return x.key < y.key; });
  AtomicFileWriter w(dir.Removed());
  w.Write(removed.data(), removed.size() * sizeof(RemovedKey));
  w.Commit();
  return {{"exact_duplicates", exact.size()},
          {"near_duplicates", near},
          {"candidate_pairs", pairs},
          {"clusters", clustered}};
}

std::vector<RemovedKey> ReadRemoved(const WorkDir& dir) {
  return ReadRecords<RemovedKey>(dir.Removed());
}

}  // namespace fmstack::data
