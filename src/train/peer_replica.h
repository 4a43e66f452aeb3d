// train: peer replicas, the state checkpointless recovery restores from
// (as Gemini and torchft keep it: in host memory, on another node).
//
// Every `every` steps each data-parallel rank copies its own state into host
// memory (under ZeRO the parameters and moments of the shard it owns, under
// DDP everything) and sends it to its holder: the rank with the same local
// rank on the next node, so that losing one node never loses both copies.
// DDP's state is replicated, so there the holder's own copy serves and
// nothing is sent. A restore writes the shards back and gathers the
// parameters from them, so every byte comes from a copy. Two generations
// alternate: a failure in the middle of a refresh leaves the other whole.
// Every copy carries the XXH3 hashes its owner computed when it was taken,
// checked before the copy is used, so a copy corrupted in memory or in
// flight is refused rather than trained on.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "train/trainer.h"
#include "util/huge_pages.h"

namespace fmstack::train {

class PeerReplicas {
 public:
  // every >= 1 steps between refreshes; ranks are node-major with
  // procs_per_node ranks per node.
  PeerReplicas(int64_t every, int procs_per_node);

  PeerReplicas(const PeerReplicas&) = delete;
  PeerReplicas& operator=(const PeerReplicas&) = delete;
  ~PeerReplicas() { Wait(); }

  // After an optimizer step; collective on refresh steps (step % every ==
  // 0). The state is copied now; under ZeRO the copy's hash and its trip to
  // the holder run on a thread of their own, overlapping the next step's
  // compute (the first trip, which connects the pairs, runs inline).
  // Returns the seconds the training thread spent (0 on other steps).
  double AfterStep(Trainer& trainer);
  // Waits for the exchange in flight; before the communicator is dropped.
  void Wait();

  // The rank that holds rank r's copy, and the rank whose copy r holds.
  int HolderOf(int rank, int world) const;
  int HeldBy(int rank, int world) const;
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

  // Elastic: the world changed size. Collective over the new communicator
  // `trainer` is Reshape()d onto. The copies were taken in a group of
  // `from_world` ranks, where this rank was `from_rank` (-1: a newcomer,
  // holding nothing). Agrees on the newest step at which every shard of the
  // old group is held by a member of the new one (its owner, or its holder
  // when the owner was lost), checks each copy used against its hash,
  // assembles the whole state (parameters and both moments) from them and
  // keeps this rank's new shard: the ZeRO re-partition, in memory. Refuses
  // as Restore does, with step -1 on every rank.
  Outcome Reshape(Trainer& trainer, int from_world, int from_rank);

  // Fault rehearsal, a bad memory module: from now on one bit of every copy
  // this rank holds for its peer (its own under DDP) is flipped after the
  // hash was taken; the checksum must catch it.
  void CorruptHeldCopies();

 private:
  // A rank's state: the parameters of the runs it owns (everything under
  // DDP), then their first and second moments, in MomentRuns() order.
  struct Copy {
    int64_t step = -1;  // -1 while being written
    int world = 0;      // the group size it was taken in
    TrainCounters counters;
    HugeFloats state;
    uint64_t hash = 0;
    HugeFloats held;         // the peer's state (sharded modes)
    uint64_t held_hash = 0;  // as the peer computed it
  };
  // Copies the state into c; the exchange with the holder is returned as a
  // task (empty under DDP) for AfterStep to run inline or on its thread.
  std::function<void()> Refresh(Trainer& trainer, Copy& c);
  static size_t StateSize(Trainer& trainer);
  static void Pack(Trainer& trainer, std::span<float> out);
  static void Unpack(Trainer& trainer, std::span<const float> in);
  const Copy* Find(int64_t step) const;
  // Every rank's failure code (collective); the first one, described.
  std::optional<std::string> AnyFailure(Trainer& trainer, uint64_t failure) const;
  // The copy a refresh overwrites: the newer stays whole until it is done.
  Copy& Older() { return copies_[0].step <= copies_[1].step ? copies_[0] : copies_[1]; }
  // Refreshes Older(); the exchange runs on exchange_ once the pairs exist.
  void StartRefresh(Trainer& trainer);
  int Shift(int world) const { return world / procs_per_node_ >= 2 ? procs_per_node_ : 1; }
  static void Corrupt(Copy& c);

  int64_t every_;
  int procs_per_node_;
  std::array<Copy, 2> copies_;
  bool corrupt_ = false;
  bool connected_ = false;  // the first exchange has run (and built the pairs)
  std::thread exchange_;
};

}  // namespace fmstack::train
