// Collectives against a reference, in real processes: the test forks one
// process per rank (node-major, nodes x procs_per_node), each connects to a
// TcpStoreServer in the parent and runs every collective on data that is a
// pure function of (rank, index), so each rank can compute the expected
// result itself. A child reports failure through its exit status and stderr.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>

#include "comm/hier_comm.h"
#include "comm/path_tuner.h"
#include "comm/reduce.h"
#include "comm/tcp_store.h"
#include "fork_ranks.h"

namespace fmstack::comm {
namespace {

using Body = std::function<void(Communicator&, const CommOptions&)>;
const std::string kSecret = "0123456789abcdef-test-secret";

struct Layout {
  int nodes, procs;
  std::string transport = "auto";
  std::string net = "tcp";  // CommOptions::net: between nodes
};

// Runs body on every rank; returns the exit statuses by rank.
std::vector<int> RunRanks(const Layout& layout, const Body& body, TcpStoreServer& server,
                          int64_t generation = 0, size_t slot_bytes = 64 << 10,
                          size_t rail_min_bytes = CommOptions{}.rail_min_bytes) {
  const int world = layout.nodes * layout.procs;
  const std::vector<pid_t> pids = testing::SpawnRanks(world, [&](int r) {
    CommOptions o;
    o.store = std::make_shared<TcpStore>("127.0.0.1", server.port(), kSecret);
    o.rank = r;
    o.size = world;
    o.local_rank = r % layout.procs;
    o.local_size = layout.procs;
    o.job_id = "t" + std::to_string(::getppid());
    o.generation = generation;
    o.transport = layout.transport;
    o.timeout = std::chrono::seconds(20);
    o.shm_slot_bytes = slot_bytes;  // small, so that windows are exercised
    o.shm_cma_chunk_bytes = std::max<size_t>(slot_bytes, 4096);  // and the single-copy reads
    o.rail_min_bytes = rail_min_bytes;
    o.net = layout.net;
    auto comm = Connect(o);
    body(*comm, o);
  });
  // Reap as a supervisor does: the first rank to die abnormally is reported
  // in the store, where the survivors look for whom to blame. Ranks time out
  // their own waits after 20 s; a rank still alive at the deadline is hung
  // outside them, and is named and killed so that the test fails, not stalls.
  std::vector<int> status(world);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  bool killed = false;
  for (int left = world; left > 0;) {
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid <= 0) {
      if (pid < 0) break;  // no children left to wait for
      if (!killed && std::chrono::steady_clock::now() > give_up) {
        for (int r = 0; r < world; ++r) {
          if (::kill(pids[r], 0) == 0) {
            ADD_FAILURE() << "rank " << r << " still running after 300 s, killed";
            ::kill(pids[r], SIGKILL);
          }
        }
        killed = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    --left;
    const int r = static_cast<int>(std::find(pids.begin(), pids.end(), pid) - pids.begin());
    if (r >= world) continue;
    status[r] = st;
    if (WIFSIGNALED(st) && !server.Has(FailureKey(generation))) {
      server.Set(FailureKey(generation),
                 std::to_string(r) + " killed by signal " + std::to_string(WTERMSIG(st)));
    }
  }
  return status;
}

void ExpectAllOk(const std::vector<int>& status) {
  for (size_t r = 0; r < status.size(); ++r) {
    EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0) << "rank " << r;
  }
}

float Value(int rank, size_t i) {
  return static_cast<float>(((rank + 1) * 7919 + i * 104729) % 1000) / 64.0f - 7.0f;
}

void Check(bool ok, const std::string& what) {
  if (!ok) throw Error(what);
}

// bf16 error bound: up to `terms` roundings, each within 2^-9 of a partial sum
// no larger than terms * max|Value| (8.6).
void CheckClose(float got, float want, DType t, const std::string& what, int terms = 1) {
  const float tol = t == DType::kF32
                        ? 1e-4f * (1 + std::fabs(want))
                        : static_cast<float>(terms * terms) * 8.6f / 512.0f + std::fabs(want) / 256;
  Check(std::fabs(got - want) <= tol,
        what + ": got " + std::to_string(got) + ", want " + std::to_string(want));
}

// Typed buffer of n elements holding Value(rank, i) in dtype.
struct Buf {
  DType t;
  std::vector<float> f;
  std::vector<Bf16> b;
  Buf(DType dtype, size_t n)
      : t(dtype), f(dtype == DType::kF32 ? n : 0), b(dtype == DType::kBf16 ? n : 0) {}
  View view() { return t == DType::kF32 ? View(std::span<float>(f)) : View(std::span<Bf16>(b)); }
  float get(size_t i) const { return t == DType::kF32 ? f[i] : FromBf16(b[i]); }
  void set(size_t i, float v) {
    if (t == DType::kF32)
      f[i] = v;
    else
      b[i] = ToBf16(v);
  }
  void Fill(int rank) {
    for (size_t i = 0; i < f.size() + b.size(); ++i) set(i, Value(rank, i));
  }
};

// Reference sum of the (possibly bf16-rounded) inputs.
float SumAt(DType t, int world, size_t i) {
  float s = 0;
  for (int r = 0; r < world; ++r)
    s += t == DType::kF32 ? Value(r, i) : FromBf16(ToBf16(Value(r, i)));
  return s;
}

void AllCollectives(Communicator& c, const CommOptions&) {
  const int W = c.size(), me = c.rank();
  // Every shared-memory path: small (up to 64 KiB), two-round reductions (up
  // to 1 MiB, 262144 floats exactly), single-copy and slot windows above.
  const std::vector<size_t> sizes = {0, 1, 3, 7, 1000, 4099, 70001, 262144};
  for (DType t : {DType::kF32, DType::kBf16}) {
    for (size_t n : sizes) {
      const std::string tag = std::string(DTypeName(t)) + " n=" + std::to_string(n);
      Buf a(t, n);
      a.Fill(me);
      c.AllReduce(a.view(), ReduceOp::kSum);
      for (size_t i = 0; i < n; ++i) CheckClose(a.get(i), SumAt(t, W, i), t, "allreduce " + tag, W);
      a.Fill(me);
      c.AllReduce(a.view(), ReduceOp::kAvg);
      for (size_t i = 0; i < n; ++i)
        CheckClose(a.get(i), SumAt(t, W, i) / static_cast<float>(W), t, "allreduce avg " + tag, W);

      const Range mine = ShardOf(n, W, me);
      Buf in(t, n), out(t, mine.count);
      in.Fill(me);
      c.ReduceScatter(in.view(), out.view(), ReduceOp::kSum);
      for (size_t i = 0; i < mine.count; ++i) {
        CheckClose(out.get(i), SumAt(t, W, mine.begin + i), t, "reduce_scatter " + tag, W);
      }

      Buf shard(t, mine.count), full(t, n);
      for (size_t i = 0; i < mine.count; ++i) shard.set(i, Value(me, mine.begin + i));
      c.AllGather(shard.view(), full.view());
      for (int r = 0; r < W; ++r) {
        const Range g = ShardOf(n, W, r);
        for (size_t i = 0; i < g.count; ++i) {
          CheckClose(full.get(g.begin + i), Value(r, g.begin + i), t, "allgather " + tag);
        }
      }

      for (int root : {0, W - 1}) {
        Buf bc(t, n);
        bc.Fill(me);
        c.Broadcast(bc.view(), root);
        for (size_t i = 0; i < n; ++i) {
          CheckClose(bc.get(i),
                     t == DType::kF32 ? Value(root, i) : FromBf16(ToBf16(Value(root, i))), t,
                     "broadcast root " + std::to_string(root) + " " + tag);
        }
      }

      const size_t block = n / 4 + 1;
      Buf x(t, block * W), y(t, block * W);
      for (int j = 0; j < W; ++j) {
        for (size_t i = 0; i < block; ++i) x.set(j * block + i, Value(me * 100 + j, i));
      }
      c.AllToAll(x.view(), y.view());
      for (int j = 0; j < W; ++j) {
        for (size_t i = 0; i < block; ++i) {
          const float want = Value(j * 100 + me, i);
          CheckClose(y.get(j * block + i), t == DType::kF32 ? want : FromBf16(ToBf16(want)), t,
                     "alltoall " + tag);
        }
      }
      Buf z = x;  // in place: every path must read a block before it is overwritten
      c.AllToAll(z.view(), z.view());
      for (size_t i = 0; i < block * W; ++i)
        Check(z.get(i) == y.get(i), "alltoall in place " + tag);
      c.Barrier();
    }
  }
}

class CommTest : public ::testing::TestWithParam<Layout> {};

TEST_P(CommTest, EveryCollectiveMatchesTheReference) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  ExpectAllOk(RunRanks(GetParam(), AllCollectives, server));
}

// A variable set (to 1 unless said) for the ranks forked while it lives.
struct OptIn {
  explicit OptIn(const char* name, const char* value = "1") : name_(name) {
    ::setenv(name, value, 1);
  }
  ~OptIn() { ::unsetenv(name_); }
  OptIn(const OptIn&) = delete;
  OptIn& operator=(const OptIn&) = delete;

 private:
  const char* name_;
};
// The post-and-wait paths everywhere ("1"), or nowhere ("0"); by default
// they run where every local rank has a core.
struct PostWait : OptIn {
  explicit PostWait(const char* value = "1") : OptIn("FMSTACK_SHM_POST_WAIT", value) {}
};

// Every collective over 64 KiB through cross-memory attach, reductions too
// and with more ranks than cores (FMSTACK_SHM_CMA_REDUCE=1): the default
// leaves those to the slots.
TEST(CommTest, CrossMemoryAttachReductionsMatchTheReference) {
  const OptIn on("FMSTACK_SHM_CMA_REDUCE");
  for (const Layout& layout : {Layout{1, 2}, Layout{2, 2}, Layout{1, 5}}) {
    TcpStoreServer server("127.0.0.1", 0, kSecret);
    ExpectAllOk(RunRanks(layout, AllCollectives, server));
  }
}

// Allreduce across nodes both ways at every size: along rails (down to one
// element, so that some local ranks hold empty shards) and through the
// leaders alone. The default picks by size, which the layouts above cover.
TEST(CommTest, AllReduceAlongRailsAndThroughLeadersMatchesTheReference) {
  for (const size_t rail_min_bytes : {size_t{1}, size_t{0}}) {
    for (const Layout& layout : {Layout{2, 2}, Layout{3, 2}, Layout{2, 4}}) {
      TcpStoreServer server("127.0.0.1", 0, kSecret);
      ExpectAllOk(RunRanks(layout, AllCollectives, server, 0, 64 << 10, rail_min_bytes));
    }
  }
}

// The post-and-wait paths: small messages on every layout with local
// peers, and (with more local ranks than this machine's cores) the
// two-round reductions.
TEST(CommTest, PostAndWaitPathsMatchTheReference) {
  const PostWait on;
  for (const Layout& layout : {Layout{1, 2}, Layout{2, 2}, Layout{1, 5}, Layout{2, 4}}) {
    TcpStoreServer server("127.0.0.1", 0, kSecret);
    ExpectAllOk(RunRanks(layout, AllCollectives, server));
  }
}

// The barrier paths on layouts whose ranks would take post-and-wait by
// default wherever they fit the cores.
TEST(CommTest, BarrierPathsMatchTheReference) {
  const PostWait off("0");
  for (const Layout& layout : {Layout{1, 2}, Layout{2, 2}}) {
    TcpStoreServer server("127.0.0.1", 0, kSecret);
    ExpectAllOk(RunRanks(layout, AllCollectives, server));
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CommTest,
                         ::testing::Values(Layout{1, 1}, Layout{1, 2}, Layout{2, 1}, Layout{1, 3},
                                           Layout{2, 2}, Layout{3, 1}, Layout{1, 5}, Layout{3, 2},
                                           Layout{2, 4}, Layout{1, 8}, Layout{4, 1}, Layout{5, 1},
                                           Layout{2, 3, "tcp"}, Layout{3, 2, "auto", "gloo"},
                                           Layout{2, 3, "gloo"}, Layout{1, 4, "gloo"}),
                         [](const auto& p) {
                           return std::to_string(p.param.nodes) + "x" +
                                  std::to_string(p.param.procs) + "_" + p.param.transport +
                                  (p.param.net != "tcp" ? "_" + p.param.net : "");
                         });

// Two ranks that send each other more than their sockets buffer must not
// deadlock: every size must complete, on the mesh and on Gloo.
TEST(CommTest, LargeAllReducesAcrossNodesComplete) {
  for (const Layout& layout : {Layout{2, 1}, Layout{3, 1}, Layout{2, 1, "auto", "gloo"}}) {
    TcpStoreServer server("127.0.0.1", 0, kSecret);  // a group's keys are per store
    ExpectAllOk(RunRanks(
        layout,
        [](Communicator& c, const CommOptions&) {
          for (const size_t n : {size_t{1} << 14, size_t{1} << 20, size_t{16} << 20}) {
            std::vector<float> buf(n, static_cast<float>(c.rank() + 1));
            c.AllReduce(std::span<float>(buf), ReduceOp::kSum);
            const float want = static_cast<float>(c.size() * (c.size() + 1) / 2);
            for (size_t i = 0; i < n; i += 4099) {
              if (buf[i] != want)
                throw Error("allreduce of " + std::to_string(n) + " floats: wrong sum");
            }
          }
        },
        server));
  }
}

// From 1 MiB a node's allreduce alternates the slots and cross-memory attach
// while it times them, then keeps one (path_tuner.h): whichever it takes,
// every element is the rank-order sum, bit for bit. Enough calls for two
// periods' explorations and decisions.
TEST(CommTest, TunedAllReduceGivesTheSameBitsOnEveryPath) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  ExpectAllOk(RunRanks(
      Layout{1, 2},
      [](Communicator& c, const CommOptions&) {
        const size_t n = (size_t{1} << 18) + 4099;  // just over 1 MiB of floats
        std::vector<float> want(n);
        for (size_t i = 0; i < n; ++i) {
          float s = 0;
          for (int r = 0; r < c.size(); ++r) s += Value(r, i) / 3.0f;
          want[i] = s;
        }
        std::vector<float> buf(n);
        for (int call = 0; call < 2 * PathTuner::kPeriod + PathTuner::kExplore; ++call) {
          for (size_t i = 0; i < n; ++i) buf[i] = Value(c.rank(), i) / 3.0f;
          c.AllReduce(std::span<float>(buf), ReduceOp::kSum);
          if (std::memcmp(buf.data(), want.data(), n * sizeof(float)) != 0)
            throw Error("allreduce call " + std::to_string(call) + ": not the rank-order sum");
        }
      },
      server));
}

TEST(CommTest, RunToRunBitwiseIdentical) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  // Each rank writes its result bits to the store; two runs must agree.
  auto body = [](Communicator& c, const CommOptions& o) {
    std::vector<float> a(50001);
    for (size_t i = 0; i < a.size(); ++i) a[i] = Value(c.rank(), i) * 1.37e-3f;
    c.AllReduce(std::span<float>(a), ReduceOp::kSum);
    uint64_t h = 1469598103934665603ull;
    for (float v : a) h = (h ^ std::bit_cast<uint32_t>(v)) * 1099511628211ull;
    o.store->Set("hash/g" + std::to_string(o.generation) + "/r" + std::to_string(c.rank()),
                 std::to_string(h));
  };
  ExpectAllOk(RunRanks({2, 2}, body, server, 0));
  ExpectAllOk(RunRanks({2, 2}, body, server, 1));
  TcpStore check("127.0.0.1", server.port(), kSecret);
  const std::string h0 = check.Get("hash/g0/r0", std::chrono::seconds(1));
  for (int g : {0, 1}) {
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(check.Get("hash/g" + std::to_string(g) + "/r" + std::to_string(r),
                          std::chrono::seconds(1)),
                h0);
    }
  }
}

// Small reductions inside a node take the two-barrier direct path; with
// slots smaller than the message they take the windowed one; up to 64 KiB
// with post-and-wait on, the regions. All sum in rank order, so every
// rank's bits agree among the three (sum and average, f32 and bf16).
TEST(CommTest, DirectSmallReductionsEqualTheWindowedOnesBitForBit) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto body = [](Communicator& c, const CommOptions& o) {
    uint64_t h = 1469598103934665603ull;
    const auto mix = [&h](const Buf& b, size_t n) {
      for (size_t i = 0; i < n; ++i) h = (h ^ std::bit_cast<uint32_t>(b.get(i))) * 1099511628211ull;
    };
    for (DType t : {DType::kF32, DType::kBf16}) {
      // 65536 floats: direct on 2 ranks with a core each (512 KiB read).
      for (size_t n : {size_t{1}, size_t{257}, size_t{1000}, size_t{65536}}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
          Buf a(t, n);
          for (size_t i = 0; i < n; ++i) a.set(i, Value(c.rank(), i) * 1.37e-3f);
          c.AllReduce(a.view(), op);
          mix(a, n);
        }
      }
    }
    o.store->Set(fmt::format("bits/g{}/r{}", o.generation, c.rank()), std::to_string(h));
  };
  // Each run is a generation of its own: its store keys and segment are new.
  int64_t generation = 0;
  for (const int procs : {2, 4}) {
    const int64_t direct = generation++, windowed = generation++, posted = generation++;
    {
      const PostWait off("0");
      ExpectAllOk(RunRanks({1, procs}, body, server, direct, 4 << 20));  // direct up to its bound
      ExpectAllOk(RunRanks({1, procs}, body, server, windowed, 256));    // windows of 256 bytes
    }
    {
      const PostWait on;
      ExpectAllOk(RunRanks({1, procs}, body, server, posted, 4 << 20));
    }
    TcpStore check("127.0.0.1", server.port(), kSecret);
    const auto bits = [&](int64_t g, int r) {
      return check.Get(fmt::format("bits/g{}/r{}", g, r), std::chrono::seconds(1));
    };
    for (int r = 0; r < procs; ++r) {
      EXPECT_EQ(bits(direct, r), bits(windowed, r)) << procs << " ranks, rank " << r;
      EXPECT_EQ(bits(direct, r), bits(posted, r)) << procs << " ranks, rank " << r;
    }
  }
}

// A rank SIGKILLs itself in the middle of a stream of allreduces. Every
// survivor must get a CommError naming it within 2 s, then rebuild a group of
// the survivors (generation 1) in the same process and go on.
void KillAndRebuild(const Layout& layout, int victim, const std::string& transport_after,
                    size_t floats = 300000) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto body = [&](Communicator& c, const CommOptions& o) {
    std::vector<float> a(floats, 1.0f);
    for (int i = 0;; ++i) {
      if (c.rank() == victim && i == 3) ::raise(SIGKILL);
      const auto start = std::chrono::steady_clock::now();
      try {
        c.AllReduce(std::span<float>(a), ReduceOp::kSum);
      } catch (const CommError& e) {
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const std::string msg = e.what();
        Check(e.failed_rank() == victim,
              "failed_rank() " + std::to_string(e.failed_rank()) + ": " + msg);
        Check(msg.find("rank " + std::to_string(victim)) != std::string::npos, "message: " + msg);
        Check(s < 2.0, "error after " + std::to_string(s) + " s: " + msg);
        break;
      }
      Check(i < 1000, "the victim never died");
    }
    // Rebuild among the survivors, one rank per "node", without restarting.
    CommOptions n = o;
    n.generation = 1;
    n.size = layout.nodes * layout.procs - 1;
    n.rank = o.rank < victim ? o.rank : o.rank - 1;
    n.local_rank = 0;
    n.local_size = 1;
    n.transport = transport_after;
    auto again = Connect(n);
    std::vector<float> b(1000, 1.0f);
    again->AllReduce(std::span<float>(b), ReduceOp::kSum);
    Check(b[999] == static_cast<float>(n.size), "rebuilt group sums to " + std::to_string(b[999]));
  };
  const auto status = RunRanks(layout, body, server);
  for (int r = 0; r < static_cast<int>(status.size()); ++r) {
    if (r == victim) {
      EXPECT_TRUE(WIFSIGNALED(status[r]));
    } else {
      EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0) << "rank " << r;
    }
  }
}

TEST(CommTest, KilledPeerIsNamedWithinTwoSecondsAcrossNodes) {
  KillAndRebuild({2, 2}, 3, "auto");
}
TEST(CommTest, KilledPeerIsNamedWithinTwoSecondsInsideANode) {
  KillAndRebuild({1, 3}, 1, "auto");
}
// 4 KiB: the post-and-wait path, which watches the peer it waits for.
TEST(CommTest, KilledPeerIsNamedWithinTwoSecondsOnTheSmallPath) {
  const PostWait on;
  KillAndRebuild({1, 3}, 2, "auto", 1000);
}
TEST(CommTest, KilledPeerIsNamedWithinTwoSecondsOverGloo) {
  KillAndRebuild({1, 4, "gloo"}, 2, "gloo");
}
TEST(CommTest, KilledPeerIsNamedWithinTwoSecondsOverTheTcpMesh) {
  KillAndRebuild({1, 4, "tcp"}, 1, "tcp");
  KillAndRebuild({4, 1}, 2, "auto", 1000);  // small: recursive doubling
}

TEST(CommTest, AbortFailsPendingAndLaterCalls) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  // Rank 1 never joins the allreduce; rank 0 aborts from another thread.
  auto body = [](Communicator& c, const CommOptions& o) {
    std::vector<float> a(1000, 1.0f);
    if (c.rank() == 1) {
      o.store->Get("done" + std::to_string(o.generation), std::chrono::seconds(10));
      return;
    }
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      c.Abort("operator asked to stop");
    });
    const auto start = std::chrono::steady_clock::now();
    try {
      c.AllReduce(std::span<float>(a), ReduceOp::kSum);
      Check(false, "allreduce returned without its peer");
    } catch (const CommError& e) {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      Check(s < 5.0, "pending call failed only after " + std::to_string(s) + " s");
    }
    aborter.join();
    try {
      c.Barrier();
      Check(false, "barrier after abort returned");
    } catch (const CommError& e) {
      Check(std::string(e.what()).find("operator asked to stop") != std::string::npos, e.what());
    }
    o.store->Set("done" + std::to_string(o.generation), "1");
  };
  ExpectAllOk(RunRanks({1, 2, "gloo"}, body, server));
  ExpectAllOk(RunRanks({1, 2}, body, server, 1));
}

// Every rank's control thread aborts its group when the supervisor replaces
// a lost rank, so aborts race. A barrier must never open for a rank while an
// abort is still being written: in one CI run a rank left a shared-memory
// barrier that way, read the previous step's words from the segment and
// reported a silent corruption that was not there.
TEST(CommTest, RacingAbortsNeverOpenABarrier) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto body = [](Communicator&, const CommOptions& o) {
    std::vector<int> opened;  // generations whose barrier opened for rank 1
    for (int i = 1; i <= 1000; ++i) {
      CommOptions n = o;
      n.generation = i;
      const std::unique_ptr<Communicator> c = Connect(n);
      const std::string waiting = "waiting/" + std::to_string(i);
      if (c->rank() == 1) {
        o.store->Set(waiting, "1");
        try {
          c->Barrier();
          opened.push_back(i);
        } catch (const CommError&) {
        }
        continue;
      }
      o.store->Get(waiting, std::chrono::seconds(10));
      std::this_thread::sleep_for(
          std::chrono::microseconds(20 * (i % 10)));  // rank 1 spins or sleeps
      std::atomic<int> ready{0};
      // One thread aborts once; the other keeps aborting, as the failed
      // collectives of a dying group do, to land inside the first's write.
      auto abort = [&](const char* who, int times) {
        ready.fetch_add(1);
        while (ready.load() < 2) {
        }
        for (int k = 0; k < times; ++k) c->Abort(who);
      };
      std::thread a(abort, "the control thread", 1), b(abort, "a failed collective", 200);
      a.join();
      b.join();
    }
    Check(opened.empty(), fmt::format("the barrier opened without rank 0 in {} of 1000 "
                                      "generations, first {}",
                                      opened.size(), opened.empty() ? 0 : opened[0]));
  };
  ExpectAllOk(RunRanks({1, 2}, body, server, 0));
}

TEST(CommTest, StoreBlocksUntilKeyAndTimesOut) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  TcpStore a("127.0.0.1", server.port(), kSecret), b("127.0.0.1", server.port(), kSecret);
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    b.Set("k", "v");
  });
  EXPECT_EQ(a.Get("k", std::chrono::seconds(5)), "v");
  setter.join();
  EXPECT_EQ(a.Add("n", 2), 2);
  EXPECT_EQ(b.Add("n", 3), 5);
  EXPECT_FALSE(a.TryGet("missing", std::chrono::milliseconds(50)).has_value());
  try {
    a.wait({"k", "missing"}, std::chrono::milliseconds(50));
    FAIL() << "wait should time out";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fmstack::comm
