#include "train/peer_replica.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "util/error.h"

namespace fmstack::train {
namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Raw 64-bit words through a float View: point to point moves bytes as they are.
comm::View Words(std::span<uint64_t> w) {
  return comm::View(reinterpret_cast<std::byte*>(w.data()), w.size() * 2, comm::DType::kF32);
}

// What a holder sends a replacement before the payload.
enum Header : size_t { kStep, kTokens, kSeed, kRng, kState, kStateHash, kHeaderWords };

// Why a rank could not restore, as a code every rank can put into words.
enum Failure : uint64_t { kOk, kHeader, kChecksum, kOwnChecksum };

std::string Describe(uint64_t failure, int rank, int holder) {
  switch (failure) {
    case kHeader:
      return fmt::format("rank {}: the copy from rank {} does not fit this model or step", rank,
                         holder);
    case kChecksum:
      return fmt::format("rank {}: its copy held by rank {} failed its checksum", rank, holder);
    default:
      return fmt::format("rank {}: its own in-memory copy failed its checksum", rank);
  }
}

}  // namespace

std::optional<std::string> PeerReplicas::AnyFailure(Trainer& trainer, uint64_t failure) const {
  const std::vector<uint64_t> all = trainer.AllWords(std::array<uint64_t, 1>{failure});
  for (int k = 0; k < trainer.world(); ++k) {
    if (all[static_cast<size_t>(k)] != kOk)
      return Describe(all[static_cast<size_t>(k)], k, HolderOf(k, trainer.world()));
  }
  return std::nullopt;
}

PeerReplicas::PeerReplicas(int64_t every, int procs_per_node)
    : every_(std::max<int64_t>(1, every)), procs_per_node_(std::max(1, procs_per_node)) {}

int PeerReplicas::HolderOf(int rank, int world) const {
  return (rank + Shift(world)) % world;
}

int PeerReplicas::HeldBy(int rank, int world) const {
  return (rank - Shift(world) % world + world) % world;
}

const PeerReplicas::Copy* PeerReplicas::Find(int64_t step) const {
  for (const Copy& c : copies_) {
    if (c.step == step && step >= 0) return &c;
  }
  return nullptr;
}

size_t PeerReplicas::StateSize(Trainer& trainer) {
  size_t n = 0;
  for (const Trainer::MomentRun& r : trainer.MomentRuns()) n += 3 * r.m.size();
  return n;
}

void PeerReplicas::Pack(Trainer& trainer, std::span<float> out) {
  const std::vector<Trainer::MomentRun> runs = trainer.MomentRuns();
  const std::span<const float> params = trainer.model().params();
  float* at = out.data();
  for (const auto& r : runs) at = std::copy_n(params.data() + r.flat, r.m.size(), at);
  for (const auto& r : runs) at = std::copy(r.m.begin(), r.m.end(), at);
  for (const auto& r : runs) at = std::copy(r.v.begin(), r.v.end(), at);
}

void PeerReplicas::Unpack(Trainer& trainer, std::span<const float> in) {
  const std::vector<Trainer::MomentRun> runs = trainer.MomentRuns();
  const std::span<float> params = trainer.model().params();
  const float* at = in.data();
  for (const auto& r : runs) {
    std::copy_n(at, r.m.size(), params.data() + r.flat);
    at += r.m.size();
  }
  for (const auto& r : runs) {
    std::copy_n(at, r.m.size(), r.m.begin());
    at += r.m.size();
  }
  for (const auto& r : runs) {
    std::copy_n(at, r.v.size(), r.v.begin());
    at += r.v.size();
  }
}

double PeerReplicas::AfterStep(Trainer& trainer) {
  if (trainer.world() < 2 || trainer.step() % every_ != 0) return 0;
  const auto start = std::chrono::steady_clock::now();
  Wait();
  StartRefresh(trainer);
  return Since(start);
}

void PeerReplicas::StartRefresh(Trainer& trainer) {
  std::function<void()> exchange = Refresh(trainer, Older());
  if (exchange && connected_) {
    exchange_ = std::thread(std::move(exchange));
  } else if (exchange) {
    exchange();
    connected_ = true;
  }
}

void PeerReplicas::Wait() {
  if (exchange_.joinable()) exchange_.join();
}

std::function<void()> PeerReplicas::Refresh(Trainer& trainer, Copy& c) {
  c.step = -1;
  c.world = trainer.world();
  c.counters = trainer.counters();
  c.state.resize(StateSize(trainer));  // the same size every time: no new pages
  Pack(trainer, c.state);
  if (!trainer.sharded()) {
    c.hash = HashFloats(c.state);
    if (corrupt_) Corrupt(c);
    c.step = c.counters.step;
    return {};
  }
  comm::Communicator* comm = trainer.communicator();
  const int w = trainer.world(), r = trainer.rank();
  // A shard is a fraction of the model: anything larger is not a shard.
  const size_t limit = 3 * trainer.model().params().size();
  return [this, &c, comm, to = HolderOf(r, w), from = HeldBy(r, w), limit] {
    try {
      c.hash = HashFloats(c.state);
      std::array<uint64_t, 2> mine{c.state.size(), c.hash}, theirs{};
      comm->SendRecv(Words(mine), to, Words(theirs), from);
      if (theirs[0] > limit) {
        throw Error(
            fmt::format("peer replica: rank {} announced a state of {} values for a "
                        "model of {} parameters",
                        from, theirs[0], limit / 3));
      }
      c.held.resize(theirs[0]);
      comm->SendRecv(comm::View(std::span<float>(c.state)), to,
                     comm::View(std::span<float>(c.held)), from);
      c.held_hash = theirs[1];
      if (corrupt_) Corrupt(c);
      c.step = c.counters.step;
    } catch (const std::exception&) {
      // The copy stays incomplete (step -1); the training thread meets the
      // same failure in its next collective and recovers from the other.
    }
  };
}

PeerReplicas::Outcome PeerReplicas::Restore(Trainer& trainer, bool fresh) {
  const auto start = std::chrono::steady_clock::now();
  Wait();
  Outcome out;
  const int w = trainer.world(), r = trainer.rank();
  // Rank-major words: (fresh, copy 0's step + 1, copy 1's step + 1).
  const std::array<uint64_t, 3> mine{fresh ? 1u : 0u,
                                     fresh ? 0 : static_cast<uint64_t>(copies_[0].step + 1),
                                     fresh ? 0 : static_cast<uint64_t>(copies_[1].step + 1)};
  const std::vector<uint64_t> all = trainer.AllWords(mine);
  auto is_fresh = [&](int k) { return all[3 * static_cast<size_t>(k)] != 0; };
  auto holds = [&](int k, int64_t step) {
    return all[3 * static_cast<size_t>(k) + 1] == static_cast<uint64_t>(step + 1) ||
           all[3 * static_cast<size_t>(k) + 2] == static_cast<uint64_t>(step + 1);
  };
  // The newest step that every survivor holds a copy of.
  std::optional<int64_t> step;
  std::string held;
  for (int k = 0; k < w; ++k) {
    if (is_fresh(k)) continue;
    held += fmt::format("{}rank {}: {} {}", held.empty() ? "" : ", ", k,
                        static_cast<int64_t>(all[3 * static_cast<size_t>(k) + 1]) - 1,
                        static_cast<int64_t>(all[3 * static_cast<size_t>(k) + 2]) - 1);
    for (int slot = 1; slot <= 2; ++slot) {
      const int64_t s = static_cast<int64_t>(all[3 * static_cast<size_t>(k) + slot]) - 1;
      if (s < 0 || (step && s <= *step)) continue;
      bool everyone = true;
      for (int o = 0; o < w && everyone; ++o) everyone = is_fresh(o) || holds(o, s);
      if (everyone) step = s;
    }
  }
  if (held.empty()) {
    out.source = "no rank survived with a copy";
    return out;
  }
  if (!step) {
    out.source = fmt::format("the surviving copies share no step ({})", held);
    return out;
  }
  for (int d = 0; d < w; ++d) {
    if (is_fresh(d) && is_fresh(HolderOf(d, w))) {
      out.source = fmt::format(
          "both copies of rank {} were lost (its holder, rank {}, was "
          "replaced too)",
          d, HolderOf(d, w));
      return out;
    }
  }

  // Holders send the replacements what they hold; the rest take part in
  // the rounds with nothing to move.
  const Copy* own = fresh ? nullptr : Find(*step);
  const int serve = !fresh && is_fresh(HeldBy(r, w)) ? HeldBy(r, w) : -1;
  const int from = fresh ? HolderOf(r, w) : -1;
  comm::Communicator& comm = *trainer.communicator();
  // Under DDP every rank's state is the same: the holder's own copy serves.
  const HugeFloats* served = nullptr;
  std::array<uint64_t, kHeaderWords> send{}, got{};
  if (serve >= 0) {
    served = trainer.sharded() ? &own->held : &own->state;
    send = {static_cast<uint64_t>(own->step),
            static_cast<uint64_t>(own->counters.tokens),
            own->counters.seed,
            own->counters.rng,
            served->size(),
            trainer.sharded() ? own->held_hash : own->hash};
  }
  comm.SendRecv(Words(send), serve, Words(got), from);
  HugeFloats received;
  Failure failure = kOk;
  if (fresh) {
    received.resize(StateSize(trainer));
    if (got[kStep] != static_cast<uint64_t>(*step) || got[kState] != received.size())
      failure = kHeader;
  }
  // Sizes first: a replacement that cannot take the payload must not be
  // sent one of a size it does not expect.
  if (std::optional<std::string> why = AnyFailure(trainer, failure)) {
    out.source = *why;
    return out;
  }
  comm.SendRecv(
      serve >= 0 ? comm::View(std::span<float>(const_cast<float*>(served->data()), served->size()))
                 : comm::View(),
      serve, fresh ? comm::View(std::span<float>(received)) : comm::View(), from);
  if (fresh) {
    out.bytes = static_cast<int64_t>(received.size() * sizeof(float));
    if (HashFloats(received) != got[kStateHash]) failure = kChecksum;
  } else if (HashFloats(own->state) != own->hash) {
    failure = kOwnChecksum;
  }
  if (std::optional<std::string> why = AnyFailure(trainer, failure)) {
    out.source = *why;
    return out;
  }
  if (fresh) {
    Unpack(trainer, received);
    trainer.set_counters({static_cast<int64_t>(got[kStep]), static_cast<int64_t>(got[kTokens]),
                          got[kSeed], got[kRng]});
  } else {
    Unpack(trainer, own->state);
    trainer.set_counters(own->counters);
  }
  trainer.GatherParams();  // ZeRO: the replica again from every rank's restored shard
  std::string replaced;
  for (int d = 0; d < w; ++d) {
    if (is_fresh(d))
      replaced +=
          fmt::format("{}rank {} from rank {}", replaced.empty() ? "" : ", ", d, HolderOf(d, w));
  }
  out.step = *step;
  out.source = replaced.empty() ? "every rank from its own copy"
                                : replaced + " (the others from their own copies)";
  // The replacements hold nothing yet: refresh now, so a second failure
  // before the next refresh step still finds two copies of every rank. The
  // rounds above connected the pairs: the exchange runs beside training.
  connected_ = true;
  StartRefresh(trainer);
  out.seconds = Since(start);
  return out;
}

void PeerReplicas::CorruptHeldCopies() {
  Wait();
  corrupt_ = true;
  for (Copy& c : copies_) Corrupt(c);
}

void PeerReplicas::Corrupt(Copy& c) {
  HugeFloats& v = c.held.empty() ? c.state : c.held;
  if (v.empty()) return;
  uint32_t word;
  std::memcpy(&word, &v[v.size() / 2], sizeof word);
  word ^= 1u << 20;
  std::memcpy(&v[v.size() / 2], &word, sizeof word);
}

}  // namespace fmstack::train
