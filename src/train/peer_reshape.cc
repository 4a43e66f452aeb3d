// PeerReplicas::Reshape: elastic shrinking and growing. The state of the old
// group is assembled whole on every member of the new one (each old shard
// from one copy: its owner's own, or its holder's when the owner was lost),
// and every member keeps what its new shard needs. Each element has exactly
// one contributor and the others add zeros, so the sum is an exact copy.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <optional>
#include <set>

#include "train/peer_replica.h"
#include "util/error.h"

namespace fmstack::train {
namespace {

// What a member of the new group reported: the rank it had in the old group
// (-1: a newcomer) and the steps of its two copies (-1: none usable).
struct Report {
  int from = -1;
  std::array<int64_t, 2> steps{-1, -1};
  bool Holds(int64_t s) const { return s >= 0 && (steps[0] == s || steps[1] == s); }
};

// Where an old shard comes from: a member of the new group, and whether from
// the copy it holds for a peer (rather than its own).
struct Source {
  int member = -1;
  bool held = false;
};

// Why a member could not serve, as a code all can put into words.
enum Failure : uint64_t { kOk, kSize, kChecksum, kOwnChecksum };

}  // namespace

PeerReplicas::Outcome PeerReplicas::Reshape(Trainer& trainer, int from_world, int from_rank) {
  const auto start = std::chrono::steady_clock::now();
  Wait();
  Outcome out;
  if (from_world < 1 || from_rank >= from_world)
    throw Error(fmt::format("reshape: rank {} of an old group of {}", from_rank, from_world));
  const int w = trainer.world(), me = trainer.rank();
  const bool sharded = trainer.sharded();
  auto usable = [&](const Copy& c) {
    return from_rank >= 0 && c.world == from_world ? static_cast<uint64_t>(c.step + 1) : 0;
  };
  const std::array<uint64_t, 3> mine{static_cast<uint64_t>(from_rank + 1), usable(copies_[0]),
                                     usable(copies_[1])};
  const std::vector<uint64_t> all = trainer.AllWords(mine);
  std::vector<Report> reports(static_cast<size_t>(w));
  std::vector<int> member_of(static_cast<size_t>(from_world), -1);
  std::set<int64_t, std::greater<>> steps;
  for (int k = 0; k < w; ++k) {
    Report& r = reports[static_cast<size_t>(k)];
    r.from = static_cast<int>(all[3 * static_cast<size_t>(k)]) - 1;
    for (size_t i = 0; i < 2; ++i) {
      r.steps[i] = static_cast<int64_t>(all[3 * static_cast<size_t>(k) + 1 + i]) - 1;
      if (r.steps[i] >= 0) steps.insert(r.steps[i]);
    }
    if (r.from >= from_world || (r.from >= 0 && member_of[static_cast<size_t>(r.from)] >= 0))
      throw Error(fmt::format("reshape: two members claim old rank {}", r.from));
    if (r.from >= 0) member_of[static_cast<size_t>(r.from)] = k;
  }
  // Under DDP every copy is the whole state: one shard, any member's copy.
  const int shards = sharded ? from_world : 1;
  auto source = [&](int o, int64_t s) -> std::optional<Source> {
    const int owner = member_of[static_cast<size_t>(o)];
    if (owner >= 0 && reports[static_cast<size_t>(owner)].Holds(s)) return Source{owner, false};
    if (!sharded) {
      for (int k = 0; k < w; ++k) {
        if (reports[static_cast<size_t>(k)].Holds(s)) return Source{k, false};
      }
      return std::nullopt;
    }
    const int h = member_of[static_cast<size_t>(HolderOf(o, from_world))];
    if (h >= 0 && reports[static_cast<size_t>(h)].Holds(s)) return Source{h, true};
    return std::nullopt;
  };
  std::optional<int64_t> step;
  for (const int64_t s : steps) {
    bool whole = true;
    for (int o = 0; o < shards && whole; ++o) whole = source(o, s).has_value();
    if (whole) {
      step = s;
      break;
    }
  }
  if (!step) {
    if (steps.empty()) {
      out.source = "no member of the new group holds a copy of the old one's state";
      return out;
    }
    const int64_t newest = *steps.begin();
    for (int o = 0; o < shards; ++o) {
      if (source(o, newest)) continue;
      const int holder = HolderOf(o, from_world);
      out.source = fmt::format(
          "no step of the old {} ranks' state survives whole: at step {}, old rank {}'s shard is "
          "held neither by itself nor by its holder (old rank {}){}",
          from_world, newest, o, holder,
          member_of[static_cast<size_t>(o)] < 0 && member_of[static_cast<size_t>(holder)] < 0
              ? ", both lost"
              : "");
      return out;
    }
  }

  // This member's parts of the whole, checked before use.
  const size_t P = trainer.model().params().size();
  std::vector<float> whole(3 * P, 0.0f);
  std::array<uint64_t, 5> counters{};  // (served, step, tokens, seed, rng)
  uint64_t failure = kOk, failed_shard = 0;
  int from_held = 0;
  for (int o = 0; o < shards; ++o) {
    const Source src = *source(o, *step);
    from_held += src.held ? 1 : 0;
    if (src.member != me) continue;
    const Copy* c = Find(*step);
    const HugeFloats& data = src.held ? c->held : c->state;
    const std::vector<comm::Range> runs = trainer.StateRunsOf(from_world, o);
    size_t n = 0;
    for (const comm::Range& r : runs) n += r.count;
    if (data.size() != 3 * n) {
      failure = kSize;
    } else if (HashFloats(data) != (src.held ? c->held_hash : c->hash)) {
      failure = src.held ? kChecksum : kOwnChecksum;
    }
    if (failure != kOk) {
      failed_shard = static_cast<uint64_t>(o);
      break;
    }
    const float* at = data.data();
    for (size_t part = 0; part < 3; ++part) {
      for (const comm::Range& r : runs) {
        std::copy_n(at, r.count, &whole[part * P + r.begin]);
        at += r.count;
      }
    }
    if (counters[0] == 0) {
      counters = {1, static_cast<uint64_t>(c->counters.step),
                  static_cast<uint64_t>(c->counters.tokens), c->counters.seed, c->counters.rng};
    }
  }
  const std::vector<uint64_t> failures =
      trainer.AllWords(std::array<uint64_t, 2>{failure, failed_shard});
  for (int k = 0; k < w; ++k) {
    const uint64_t f = failures[2 * static_cast<size_t>(k)];
    if (f == kOk) continue;
    const auto o = static_cast<int>(failures[2 * static_cast<size_t>(k) + 1]);
    out.source =
        f == kSize ? fmt::format("rank {}: its copy of old rank {} does not fit this model", k, o)
        : f == kChecksum
            ? fmt::format("old rank {}: its copy held by rank {} failed its checksum", o, k)
            : fmt::format("old rank {}: its own in-memory copy failed its checksum", o);
    return out;
  }
  trainer.communicator()->AllReduce(std::span<float>(whole), comm::ReduceOp::kSum);
  const std::vector<uint64_t> counted = trainer.AllWords(counters);
  for (size_t k = 0; k < static_cast<size_t>(w); ++k) {
    if (counted[5 * k] == 0) continue;
    trainer.set_counters({static_cast<int64_t>(counted[5 * k + 1]),
                          static_cast<int64_t>(counted[5 * k + 2]), counted[5 * k + 3],
                          counted[5 * k + 4]});
    break;
  }
  std::copy_n(whole.begin(), P, trainer.model().params().begin());
  for (const Trainer::MomentRun& r : trainer.MomentRuns()) {
    std::copy_n(&whole[P + r.flat], r.m.size(), r.m.begin());
    std::copy_n(&whole[2 * P + r.flat], r.v.size(), r.v.begin());
  }
  out.step = *step;
  out.bytes = static_cast<int64_t>(whole.size() * sizeof(float));
  out.source = fmt::format(
      "the state of {} ranks at step {} re-partitioned over {} ranks ({} of {} shards from "
      "the holders of lost ranks)",
      from_world, *step, w, from_held, shards);
  // The old group's copies fit no shard of the new one: both are dropped,
  // and fresh ones are taken at once (the pairs are new: inline).
  for (Copy& c : copies_) c.step = -1;
  connected_ = false;
  StartRefresh(trainer);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace fmstack::train
