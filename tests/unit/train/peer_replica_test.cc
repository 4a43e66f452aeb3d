// Peer replicas in real processes over the job's real communicator: four
// ranks (2 nodes x 2) train, refresh their copies, train one step more
// without a refresh, then lose some ranks. The lost ones come back as fresh
// trainers and every rank meets in a new generation: the restore must bring
// every rank back to the refreshed step with exactly the state it had
// there, or refuse (both copies lost, a corrupted copy) on every rank alike.
#include "train/peer_replica.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "comm/hier_comm.h"
#include "comm/tcp_store.h"
#include "fork_ranks.h"
#include "gpt/sgemm_peak.h"
#include "util/random.h"

namespace fmstack::train {
namespace {

const std::string kSecret = "peer-replica-test-secret-0123456789";
constexpr int kNodes = 2, kProcs = 2, kWorld = kNodes * kProcs;

TrainConfig Config() {
  TrainConfig c;
  c.shape.name = "tiny";
  c.shape.layers = 2, c.shape.hidden = 32, c.shape.heads = 4, c.shape.kv_heads = 4;
  c.shape.ffn_hidden = 128, c.shape.vocab = 64, c.shape.seq_len = 16;
  c.micro_batch = 2, c.grad_accum = 4, c.steps = 20, c.seed = 5;
  c.optim.lr = 3e-3, c.optim.warmup_steps = 2;
  return c;
}

// Written once by the test's process, read by every rank it forks; named
// by that process, since ctest runs the cases side by side.
std::string DataPath(pid_t test = ::getpid()) {
  return ::testing::TempDir() + "/peer_replica_tokens." + std::to_string(test) + ".bin";
}

void WriteData() {
  Rng rng(3);
  std::vector<int32_t> tokens(4096);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.Below(64));
  WriteTokenFile(DataPath(), tokens, 64);
}

uint64_t MomentsHash(Trainer& t) {
  std::vector<float> all;
  for (const Trainer::MomentRun& r : t.MomentRuns()) {
    all.insert(all.end(), r.m.begin(), r.m.end());
    all.insert(all.end(), r.v.begin(), r.v.end());
  }
  return HashFloats(all);
}

// The whole moments of the group (collective): each rank's runs summed into
// zeros, so every element comes from its one owner, exactly.
uint64_t WholeMomentsHash(Trainer& t) {
  const size_t n = t.model().params().size();
  std::vector<float> whole(2 * n, 0.0f);
  for (const Trainer::MomentRun& r : t.MomentRuns()) {
    std::copy(r.m.begin(), r.m.end(), whole.begin() + static_cast<long>(r.flat));
    std::copy(r.v.begin(), r.v.end(), whole.begin() + static_cast<long>(n + r.flat));
  }
  if (t.sharded()) t.communicator()->AllReduce(std::span<float>(whole), comm::ReduceOp::kSum);
  return HashFloats(whole);
}

// Every rank out of its last collective before any drops the group
// (dropping aborts it, as a failure would).
void Barrier(comm::TcpStore& store, const std::string& name, const std::vector<int>& ranks,
             int rank) {
  store.Set(name + "/" + std::to_string(rank), "1");
  for (const int r : ranks) store.Get(name + "/" + std::to_string(r), std::chrono::seconds(30));
}

void ExpectEqualReplicas(Trainer& t) {
  const std::vector<uint64_t> hashes = t.AllWords(std::array<uint64_t, 1>{t.ParamHash()});
  if (std::adjacent_find(hashes.begin(), hashes.end(), std::not_equal_to<>()) != hashes.end())
    throw Error("replicas differ after the first step on the new group");
}

struct Scenario {
  DpMode mode = DpMode::kZero1;
  std::set<int> lost{};     // ranks that come back as fresh processes
  int corrupt_holder = -1;  // this rank's held copies are corrupted
  std::string refusal{};    // expected in the outcome when the restore must fail
  bool elastic = false;     // the lost ranks leave, and come back later
};

std::unique_ptr<comm::Communicator> Join(int rank, int64_t generation, uint16_t port,
                                         int world = kWorld) {
  comm::CommOptions o;
  o.store = std::make_shared<comm::TcpStore>("127.0.0.1", port, kSecret);
  // A group that is not whole nodes (3 ranks) is one of single-rank nodes.
  const int local = world % kProcs == 0 ? kProcs : 1;
  o.rank = rank, o.size = world, o.local_rank = rank % local, o.local_size = local;
  o.job_id = "pr" + std::to_string(::getppid());
  o.generation = generation;
  o.timeout = std::chrono::seconds(20);
  return comm::Connect(o);
}

// A rank of the group after 3 steps, each with its copies refreshed, the
// last exchange done everywhere before any rank drops the group.
struct Started {
  std::unique_ptr<TokenFile> data;  // outlives the trainer, which keeps a reference
  std::unique_ptr<comm::Communicator> comm;
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<PeerReplicas> peers;
};

Started Start(int rank, const Scenario& s, uint16_t port) {
  // One thread per rank, as `fmstack run` gives them; also, a forked child
  // must not wait on the OpenMP pool its parent's earlier tests started.
  gpt::SetCpuThreads(1);
  Started r;
  r.data = std::make_unique<TokenFile>(TokenFile::Load(DataPath(::getppid())));
  r.comm = Join(rank, 0, port);
  r.trainer = std::make_unique<Trainer>(Config(), *r.data, r.comm.get(), DpConfig{s.mode});
  r.peers = std::make_unique<PeerReplicas>(1, kProcs);
  for (int i = 0; i < 3; ++i) {
    r.trainer->Step();
    r.peers->AfterStep(*r.trainer);
  }
  r.peers->Wait();
  return r;
}

// One rank's whole story; throws on anything unexpected.
void RunRank(int rank, const Scenario& s, uint16_t port) {
  auto [owned_data, comm, trainer, peers] = Start(rank, s, port);
  const TokenFile& data = *owned_data;
  if (rank == s.corrupt_holder) peers->CorruptHeldCopies();
  const uint64_t params_at_3 = trainer->ParamHash(), moments_at_3 = MomentsHash(*trainer);
  trainer->Step();  // past the copies: the restore must go back
  // Every rank is out of its last collective before any drops the group
  // (dropping aborts it, as a failure would).
  comm::TcpStore store("127.0.0.1", port, kSecret);
  store.Set("stepped/" + std::to_string(rank), "1");
  for (int r = 0; r < kWorld; ++r)
    store.Get("stepped/" + std::to_string(r), std::chrono::seconds(20));
  const bool fresh = s.lost.contains(rank);
  if (fresh) {
    // A replacement process: nothing of the old one survives.
    trainer.reset();
    peers = std::make_unique<PeerReplicas>(1, kProcs);
  } else {
    trainer->Detach();
  }
  comm.reset();
  comm = Join(rank, 1, port);
  if (fresh) {
    trainer = std::make_unique<Trainer>(Config(), data, comm.get(), DpConfig{s.mode});
  } else {
    trainer->Attach(comm.get());
  }
  const PeerReplicas::Outcome o = peers->Restore(*trainer, fresh);
  if (!s.refusal.empty()) {
    if (o.step != -1 || o.source.find(s.refusal) == std::string::npos)
      throw Error("expected a refusal naming \"" + s.refusal + "\", got step " +
                  std::to_string(o.step) + ": " + o.source);
    return;
  }
  if (o.step != 3) throw Error("restored step " + std::to_string(o.step) + ": " + o.source);
  if (trainer->step() != 3) throw Error("trainer at step " + std::to_string(trainer->step()));
  if (trainer->ParamHash() != params_at_3) throw Error("parameters differ from step 3");
  if (MomentsHash(*trainer) != moments_at_3) throw Error("moments differ from step 3");
  if (fresh && o.bytes <= 0) throw Error("a replacement received nothing");
  // The group trains on as one: the replicas stay equal.
  trainer->Step();
  ExpectEqualReplicas(*trainer);
}

// Elastic: the lost ranks' processes leave; the others go on as a smaller
// group (renumbered, node-major), then the lost ones come back as fresh
// processes and the group grows to its full size again.
void RunElasticRank(int rank, const Scenario& s, uint16_t port) {
  auto [owned_data, comm, trainer, peers] = Start(rank, s, port);
  const TokenFile& data = *owned_data;
  const uint64_t params_at_3 = trainer->ParamHash(), moments_at_3 = WholeMomentsHash(*trainer);
  trainer->Step();
  std::vector<int> all(kWorld), survivors;
  for (int r = 0; r < kWorld; ++r) all[r] = r;
  for (int r = 0; r < kWorld; ++r)
    if (!s.lost.contains(r)) survivors.push_back(r);
  comm::TcpStore store("127.0.0.1", port, kSecret);
  Barrier(store, "stepped", all, rank);
  const int small = static_cast<int>(survivors.size());
  uint64_t params_at_4 = 0, moments_at_4 = 0;
  if (s.lost.contains(rank)) {
    trainer.reset();
    peers.reset();
    comm.reset();
  } else {
    const int old_rank = trainer->rank();
    const int new_rank =
        static_cast<int>(std::find(survivors.begin(), survivors.end(), rank) - survivors.begin());
    trainer->Detach();
    comm.reset();
    comm = Join(new_rank, 1, port, small);
    trainer->Reshape(comm.get());
    const PeerReplicas::Outcome o = peers->Reshape(*trainer, kWorld, old_rank);
    if (o.step != 3)
      throw Error("shrink: restored step " + std::to_string(o.step) + ": " + o.source);
    if (trainer->step() != 3)
      throw Error("shrink: trainer at step " + std::to_string(trainer->step()));
    if (trainer->ParamHash() != params_at_3) throw Error("shrink: parameters differ from step 3");
    if (WholeMomentsHash(*trainer) != moments_at_3)
      throw Error("shrink: moments differ from step 3");
    trainer->Step();  // the global batch over fewer ranks
    peers->AfterStep(*trainer);
    peers->Wait();
    ExpectEqualReplicas(*trainer);
    params_at_4 = trainer->ParamHash(), moments_at_4 = WholeMomentsHash(*trainer);
    trainer->Step();  // past the copies again
  }
  Barrier(store, "shrunk", all, rank);
  // Grow back: the lost ranks return as newcomers holding nothing.
  const bool fresh = s.lost.contains(rank);
  const int from_rank = fresh ? -1 : trainer->rank();
  if (fresh) {
    comm = Join(rank, 2, port);
    trainer = std::make_unique<Trainer>(Config(), data, comm.get(), DpConfig{s.mode});
    peers = std::make_unique<PeerReplicas>(1, kProcs);
  } else {
    trainer->Detach();
    comm.reset();
    comm = Join(rank, 2, port);
    trainer->Reshape(comm.get());
  }
  // Everyone has the moments of step 4 only where they are the same: check
  // through the group, which every rank joins.
  const PeerReplicas::Outcome o = peers->Reshape(*trainer, small, from_rank);
  if (o.step != 4) throw Error("grow: restored step " + std::to_string(o.step) + ": " + o.source);
  const std::vector<uint64_t> expected =
      trainer->AllWords(std::array<uint64_t, 2>{params_at_4, moments_at_4});
  const int survivor = survivors.front();  // same rank number in both full groups
  const uint64_t moments = WholeMomentsHash(*trainer);
  if (trainer->ParamHash() != expected[2 * survivor] || moments != expected[2 * survivor + 1])
    throw Error("grow: the state differs from the smaller group's step 4");
  trainer->Step();
  ExpectEqualReplicas(*trainer);
}

void RunScenario(const Scenario& s) {
  WriteData();
  comm::TcpStoreServer server("127.0.0.1", 0, kSecret);
  const std::vector<int> status = testing::ForkRanks(kWorld, [&](int r) {
    if (s.elastic) {
      RunElasticRank(r, s, server.port());
    } else {
      RunRank(r, s, server.port());
    }
  });
  for (int r = 0; r < kWorld; ++r) EXPECT_TRUE(testing::ExitedCleanly(status[r])) << "rank " << r;
  std::filesystem::remove(DataPath());
}

TEST(PeerReplicas, HolderIsOnTheNextNode) {
  const PeerReplicas p(1, 2);
  EXPECT_EQ(p.HolderOf(0, 4), 2);
  EXPECT_EQ(p.HolderOf(3, 4), 1);
  EXPECT_EQ(p.HeldBy(2, 4), 0);
  EXPECT_EQ(p.HeldBy(1, 4), 3);
  const PeerReplicas one_node(1, 4);  // one node: the next rank holds it
  EXPECT_EQ(one_node.HolderOf(3, 4), 0);
  EXPECT_EQ(one_node.HeldBy(0, 4), 3);
}

TEST(PeerReplicas, ZeroShardOfALostRankComesBackExactly) {
  RunScenario({.lost = {1}});
}

TEST(PeerReplicas, AWholeNodeComesBackFromTheOtherNode) {
  RunScenario({.lost = {0, 1}});
}

TEST(PeerReplicas, DdpRankComesBackFromItsHoldersOwnCopy) {
  RunScenario({.mode = DpMode::kDdp, .lost = {2}});
}

TEST(PeerReplicas, Zero2RankComesBack) {
  RunScenario({.mode = DpMode::kZero2, .lost = {3}});
}

TEST(PeerReplicas, BothCopiesLostIsRefusedOnEveryRank) {
  RunScenario({.lost = {0, 2}, .refusal = "both copies of rank 0 were lost"});
}

TEST(PeerReplicas, ElasticShrinkRepartitionsZeroShardsAndGrowsBack) {
  RunScenario({.lost = {2, 3}, .elastic = true});
}

TEST(PeerReplicas, ElasticShrinkToAnUnevenSplitUnderZero2) {
  // 3 ranks for 4 micro-batches: one rank runs a zero-gradient round.
  RunScenario({.mode = DpMode::kZero2, .lost = {1}, .elastic = true});
}

TEST(PeerReplicas, ElasticShrinkUnderDdp) {
  RunScenario({.mode = DpMode::kDdp, .lost = {0, 1}, .elastic = true});
}

TEST(PeerReplicas, CorruptedCopyIsRefusedByItsChecksum) {
  // Rank 3 holds rank 1's copy.
  RunScenario({.lost = {1},
               .corrupt_holder = 3,
               .refusal = "rank 1: its copy held by rank 3 failed its checksum"});
}

}  // namespace
}  // namespace fmstack::train
