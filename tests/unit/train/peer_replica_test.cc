// Peer replicas in real processes over the job's real communicator: four
// ranks (2 nodes x 2) train, refresh their copies, train one step more
// without a refresh, then lose some ranks. The lost ones come back as fresh
// trainers and every rank meets in a new generation: the restore must bring
// every rank back to the refreshed step with exactly the state it had
// there, or refuse (both copies lost, a corrupted copy) on every rank alike.
#include "train/peer_replica.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "comm/hier_comm.h"
#include "comm/tcp_store.h"
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

struct Scenario {
  DpMode mode = DpMode::kZero1;
  std::set<int> lost;       // ranks that come back as fresh processes
  int corrupt_holder = -1;  // this rank's held copies are corrupted
  std::string refusal;      // expected in the outcome when the restore must fail
};

std::unique_ptr<comm::Communicator> Join(int rank, int64_t generation, uint16_t port) {
  comm::CommOptions o;
  o.store = std::make_shared<comm::TcpStore>("127.0.0.1", port, kSecret);
  o.rank = rank, o.size = kWorld, o.local_rank = rank % kProcs, o.local_size = kProcs;
  o.job_id = "pr" + std::to_string(::getppid());
  o.generation = generation;
  o.timeout = std::chrono::seconds(20);
  return comm::Connect(o);
}

// One rank's whole story; throws on anything unexpected.
void RunRank(int rank, const Scenario& s, uint16_t port) {
  // One thread per rank, as `fmstack run` gives them; also, a forked child
  // must not wait on the OpenMP pool its parent's earlier tests started.
  gpt::SetCpuThreads(1);
  const TokenFile data = TokenFile::Load(DataPath(::getppid()));
  std::unique_ptr<comm::Communicator> comm = Join(rank, 0, port);
  auto trainer = std::make_unique<Trainer>(Config(), data, comm.get(), DpConfig{s.mode});
  auto peers = std::make_unique<PeerReplicas>(1, kProcs);
  for (int i = 0; i < 3; ++i) {
    trainer->Step();
    peers->AfterStep(*trainer);
  }
  peers->Wait();  // the last exchange done everywhere before any rank drops the group
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
  const std::vector<uint64_t> hashes =
      trainer->AllWords(std::array<uint64_t, 1>{trainer->ParamHash()});
  if (std::adjacent_find(hashes.begin(), hashes.end(), std::not_equal_to<>()) != hashes.end())
    throw Error("replicas differ after the first step on the new group");
}

void RunScenario(const Scenario& s) {
  WriteData();
  comm::TcpStoreServer server("127.0.0.1", 0, kSecret);
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorld; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        RunRank(r, s, server.port());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(stderr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  for (int r = 0; r < kWorld; ++r) {
    int st = 0;
    ASSERT_EQ(::waitpid(pids[r], &st, 0), pids[r]);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "rank " << r;
  }
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

TEST(PeerReplicas, CorruptedCopyIsRefusedByItsChecksum) {
  // Rank 3 holds rank 1's copy.
  RunScenario({.lost = {1},
               .corrupt_holder = 3,
               .refusal = "rank 1: its copy held by rank 3 failed its checksum"});
}

}  // namespace
}  // namespace fmstack::train
