// train: peer replicas, the state checkpointless recovery restores from
// (as Gemini and torchft keep it: in host memory, on another node).
//
// Every `every` steps each data-parallel rank copies its own state into host
// memory (parameters, the moments it owns, counters) and sends its moments
// to its holder: the rank with the same local rank on the next node, so that
// losing one node never loses both copies. DDP's moments are replicated, so
// there the holder's own copy serves and nothing is sent. Two generations
// alternate: a failure in the middle of a refresh leaves the other whole.
// Every copy carries the XXH3 hashes its owner computed when it was taken,
// checked before the copy is used, so a copy corrupted in memory or in
// flight is refused rather than trained on.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "train/trainer.h"

namespace fmstack::train {

class PeerReplicas {
 public:
  // every >= 1 steps between refreshes; ranks are node-major with
  // procs_per_node ranks per node.
  PeerReplicas(int64_t every, int procs_per_node);

  // After an optimizer step; collective on refresh steps (step % every == 0).
  // Returns the seconds the refresh took (0 when the step had none).
  double AfterStep(Trainer& trainer);

  // The rank that holds rank r's copy, and the rank whose copy r holds.
  int HolderOf(int rank, int world) const;
  int HeldBy(int rank, int world) const;
  // The newest complete copy's step; -1 when there is none.
  int64_t newest_step() const;
  int64_t every() const { return every_; }

  struct Outcome {
    int64_t step = -1;   // the step every rank now holds; -1: no peer copy can serve
    std::string source;  // for the log: whence the replaced ranks' state came, or why not
    int64_t bytes = 0;   // received by this rank
    double seconds = 0;  // the whole restore on this rank
  };
  // Recovery, collective over the new communicator `trainer` is attached to
  // (same world size). `fresh` ranks are replacements and hold nothing.
  // Agrees on the newest step every survivor holds; survivors restore their
  // own copies, replacements receive theirs from their holders. When no
  // step can serve every rank (copies stale, both copies of a rank lost, a
  // checksum mismatch anywhere), every rank returns step -1 and the reason,
  // and the trainer's state is undefined: restore a checkpoint.
  Outcome Restore(Trainer& trainer, bool fresh);

  // Fault rehearsal, a bad memory module: from now on one bit of every copy
  // this rank holds for its peer (its own under DDP) is flipped after the
  // hash was taken; the checksum must catch it.
  void CorruptHeldCopies();

 private:
  struct Copy {
    int64_t step = -1;  // -1 while being written
    TrainCounters counters;
    std::vector<float> params;   // the full replica
    std::vector<float> moments;  // own: every run's m, then every run's v
    uint64_t params_hash = 0, moments_hash = 0;
    std::vector<float> held;  // the peer's moments (sharded modes)
    uint64_t held_hash = 0;   // as the peer computed it
  };
  void Refresh(Trainer& trainer, Copy& c);
  static std::vector<float> PackMoments(Trainer& trainer);
  static void UnpackMoments(Trainer& trainer, std::span<const float> packed);
  const Copy* Find(int64_t step) const;
  static void Corrupt(Copy& c);

  int64_t every_;
  int procs_per_node_;
  std::array<Copy, 2> copies_;
  bool corrupt_ = false;
};

}  // namespace fmstack::train
