// data: the corpus pipeline as a job (`fmstack data pipeline JOB.toml`):
// phases over a work directory, each item committed the way checkpoints
// are, so that a killed worker's item is redone and a committed one never
// is.
//
//   a  per input shard (workers): the per-document stages (shard_stages.h);
//      commits OUT/work/a/shard-NNNNNN/ {docs.jsonl, removed.jsonl (url,
//      stage, reason of each document a stage removed), exact-P.bin,
//      bands-P.bin, stats.json}, written in a temporary directory and
//      renamed into place.
//   b  per key partition (workers): exact duplicates (all but the lowest
//      document key of each 128-bit hash) and MinHash candidate pairs (the
//      documents that share a band key); commits OUT/work/b/part-NNNN/.
//      No process holds more than one partition's keys.
//   c  (coordinator) the near-duplicate clusters: union-find over the
//      candidate pairs; each cluster keeps its lowest key. Commits
//      OUT/work/removed.bin.
//   d  per input shard (workers): the kept documents, as JSON lines
//      {"url", "lang", "text"}: OUT/shard-NNNNNN.jsonl.
//   e  (coordinator) tokenize: the trainer's data directory OUT/tokens/,
//      and OUT/report.json with every stage's counts.
//
// Output is a function of the inputs and the job alone: a run killed at any
// point and started again writes the same bytes as one that was not.
//
// The coordinator holds OUT/work/LOCK for the run (one pipeline per
// output). Workers run the same binary (`fmstack data pipeline JOB
// --worker PHASE:RANK:WORKERS`): child processes (backend "local"), or one
// Slurm job step each inside the coordinator's allocation (backend
// "slurm"; OUT must be on a file system every node shares).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/pipeline_spec.h"
#include "data/shard_stages.h"

namespace fmstack::data {

// One worker's share of a phase: the items i with i % workers == rank that
// are not committed. Throws Error naming the item on failure.
void RunWorker(const PipelineSpec& spec, char phase, int rank, int workers);

struct PhaseProgress {
  char phase = 'a';
  int64_t done = 0, total = 0;  // items committed, items in the phase
  int64_t docs = 0, bytes = 0;  // read so far in phase a (committed shards)
  double seconds = 0;           // since the phase began
};

struct PipelineOptions {
  std::string self;  // the fmstack binary the workers run
  std::function<void(const PhaseProgress&)> on_progress;
  std::function<void(const std::string&)> on_note;
};

// The whole run; returns the report (also written to OUT/report.json).
nlohmann::json RunPipeline(const PipelineSpec& spec, const PipelineOptions& options);

}  // namespace fmstack::data
