// metrics: the sample ledger of a run - which micro-batches of each step
// every rank trained on, so that a run whose world changed size (elastic
// shrinking and growing) or that rolled back can prove it consumed every
// sample of every step exactly once.
//
// Each step, after its last collective, every rank appends one line to its
// own file RUN_DIR/samples/rank<R>.jsonl: the communicator generation, the
// step, and the (first, count) micro-batch range of every rank of the group
// (gathered, so one surviving rank's line speaks for all). A step trained
// again after a rollback is recorded again in a later generation; the
// audit keeps, for each step, the newest generation's record. Lines are
// written with one append each and survive a crash of the process (not of
// the host: there is no fsync per step).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace fmstack::metrics {

struct SampleRecord {
  // Which attempt trained it, in order: the supervisor's start (Unix ms;
  // a rerun in the same directory or a supervisor-restart starts later)
  // and the communicator generation within it.
  int64_t run = 0;
  int64_t generation = 0;
  int64_t step = 0;
  int64_t micro_batch = 0;  // sequences per micro-batch
  // Per rank of the group, in rank order: (first micro-batch, count).
  std::vector<std::pair<int64_t, int64_t>> ranges;
};

// Appends records to one rank's file (created with its directory).
class SampleLedger {
 public:
  explicit SampleLedger(std::string path);
  ~SampleLedger();
  SampleLedger(const SampleLedger&) = delete;
  SampleLedger& operator=(const SampleLedger&) = delete;
  // Throws Error naming the file when the append fails.
  void Append(const SampleRecord& record);

 private:
  std::string path_;
  int fd_ = -1;
};

// What the audit found.
struct SampleAudit {
  int64_t first = 1;  // steps audited: first .. steps
  int64_t steps = 0;
  int64_t micro_per_step = 0;  // grad_accum: micro-batches of each step
  int64_t micro_batch = 0;     // sequences per micro-batch
  int64_t records = 0;         // lines read
  int64_t superseded = 0;      // older generations' records of steps trained again
  struct Span {                // consecutive steps trained at one world size
    int world = 0;
    int64_t first = 0, last = 0;
  };
  std::vector<Span> worlds;
  std::vector<std::string> problems;  // empty: every sample exactly once

  bool ok() const { return problems.empty(); }
  nlohmann::json ToJson() const;
  // "60 steps x 8 micro-batches: each exactly once; 3 redone; world 4
  // (steps 1-20), 2 (steps 21-40), 4 (steps 41-60)".
  std::string Summary() const;
};

// Reads RUN_DIR/samples/*.jsonl and checks steps first..steps, each of
// `micro_per_step` micro-batches (0 for any of them: as recorded - the
// first and last step recorded, the micro-batches of the first record; a
// run started from another run's checkpoint begins past step 1). Throws
// Error naming the file and line when a line is malformed or out of
// bounds; coverage problems (a micro-batch missing or trained twice, a
// step with no record) go to problems.
SampleAudit AuditSamples(const std::string& run_dir, int64_t first, int64_t steps,
                         int64_t micro_per_step);

}  // namespace fmstack::metrics
