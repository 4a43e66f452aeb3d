// data: the per-document stages over one input shard (the pipeline's
// first phase): read, declared-language, extract, normalize, language,
// quality, url-filter, in the job's order; then the keys the dedup stages
// exchange (exact: a 128-bit hash of the text; MinHash: one key per band),
// each routed to its partition.
//
// Counts are kept per stage, by reason; bytes are the document's bytes as
// the stage sees them (raw HTML before extract, text after).
//
// Not thread-safe (one per worker thread: it owns a language classifier).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/pipeline_spec.h"

namespace fmstack::data {

struct StageCounts {
  int64_t docs_in = 0, docs_out = 0, bytes_in = 0, bytes_out = 0;
  std::map<std::string, int64_t> removed;  // reason -> documents
  void Add(const StageCounts& o);
};
void to_json(nlohmann::json& j, const StageCounts& c);
void from_json(const nlohmann::json& j, StageCounts& c);

// A document's identity across the run: its shard and its index there.
inline uint64_t DocKey(uint64_t shard, uint64_t index) {
  return (shard << 32) | index;
}

struct KeptDocument {
  uint64_t key = 0;
  std::string url, lang, text;
};

struct ExactKey {
  uint64_t h1, h2, doc;
};
struct BandKey {
  uint64_t band, doc;
};

struct RemovedDocument {
  std::string url, stage, reason, lang;  // lang: as classified so far ("" before)
};

struct ShardOutput {
  std::vector<KeptDocument> docs;
  std::vector<RemovedDocument> removed;       // by the per-document stages
  std::vector<std::vector<ExactKey>> exact;   // per partition
  std::vector<std::vector<BandKey>> bands;    // per partition
  std::map<std::string, StageCounts> counts;  // "read" and each stage kind
  int64_t minhash_shingles = 0;
  double minhash_seconds = 0;
};

class ShardStages {
 public:
  explicit ShardStages(const PipelineSpec& spec);
  ~ShardStages();

  // Reads input shard `shard` (spec.inputs[shard]) through the stages.
  // Throws Error naming the file for an input it cannot read or parse.
  ShardOutput Run(int shard);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The primary language an HTML page declares in its <html> tag, from its
// first 8 KiB, without parsing the page; "" when none.
std::string DeclaredLanguage(std::string_view html);

// The host of a URL ("https://a.b.org:8/x" -> "a.b.org"), lowercased; "" when none.
std::string HostOf(std::string_view url);

}  // namespace fmstack::data
