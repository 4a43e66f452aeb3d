// data: the corpus pipeline's job file: a `[data.pipeline]` table with its
// inputs, output and workers, and a `[[data.pipeline.stage]]` list, each a
// kind with its parameters, run in the order written:
//
//   declared-language  keep = ["ja", "en"]   the page's <html lang>, before parsing
//   extract            (HTML to text: html_text.h)
//   normalize          (NFKC and white space: normalize.h)
//   language           keep = [...]; candidates; sample_bytes   (langid.h)
//   footer             phrases = [...]; last_lines (5)   (normalize.h: StripFooter)
//   quality            every QualityOptions field as a key (quality.h)
//   url-filter         block_hosts = [...]; block_hosts_file; block_url_substrings
//   exact-dedup        (the hash of the normalized text)
//   minhash-dedup      preset = "swallow" | "fineweb"; ngram, bands, rows
//   tokenize           vocab, held_out_every (the trainer's data directory)
//
// Per-document stages come first, in any order after extract where they
// read text; the dedup stages follow them; tokenize is last. Errors are
// SpecError naming file:line, the key and what was expected.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "data/minhash.h"
#include "data/quality.h"
#include "data/reader.h"

namespace fmstack::data {

struct Stage {
  std::string kind;
  std::vector<std::string> keep;        // declared-language, language
  std::vector<std::string> candidates;  // language (default: kWebLanguages)
  size_t sample_bytes = 4096;           // language
  QualityOptions quality;
  std::vector<std::string> phrases;                            // footer
  int last_lines = 5;                                          // footer
  std::vector<std::string> block_hosts, block_url_substrings;  // url-filter
  MinHashOptions minhash;
  int64_t vocab = 4096, held_out_every = 100;  // tokenize
};

struct PipelineSpec {
  std::string file;  // the job file, for messages
  std::string name;
  std::vector<std::string> inputs;  // expanded and sorted: shard i is inputs[i]
  std::string out;                  // output directory (work files under out/work)
  std::string backend = "local";    // "local": child processes; "slurm": one srun step each
  int workers = 2;
  int partitions = 8;   // of the dedup keys: the unit of work of the dedup step
  int max_retries = 2;  // per phase, for items whose worker died
  ReadLimits limits;
  std::vector<Stage> stages;

  const Stage* Find(const std::string& kind) const;
};

// Relative inputs and out are resolved against the job file's directory.
PipelineSpec LoadPipelineSpec(const std::string& path);

// The kinds above, in their canonical order.
const std::vector<std::string>& StageKinds();

}  // namespace fmstack::data
