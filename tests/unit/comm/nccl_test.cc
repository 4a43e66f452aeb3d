// The NCCL communicator on this machine's devices: one rank per device, in
// threads of this process (NCCL refuses two ranks on one device). Without a
// device each test reports itself SKIPPED; with one device the group has one
// rank, which still runs every collective through NCCL and the deadlines.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "comm/nccl_comm.h"
#include "comm/tcp_store.h"

namespace fmstack::comm {
namespace {

const std::string kSecret = "0123456789abcdef-nccl-test";

int Devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// Runs body(rank, communicator) on `ranks` threads, rank r on device r.
template <typename Body>
void RunGroup(int ranks, const Body& body) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        cudaSetDevice(r);
        NcclOptions o;
        o.store = std::make_shared<TcpStore>("127.0.0.1", server.port(), kSecret);
        o.prefix = "test";
        o.rank = r, o.size = ranks, o.device = r;
        o.timeout = std::chrono::seconds(30);
        NcclCommunicator comm(o);
        body(r, comm);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

std::vector<float> OnDevice(View v) {
  std::vector<float> host(v.count);
  cudaMemcpy(host.data(), v.data, v.bytes(), cudaMemcpyDeviceToHost);
  return host;
}

View Device(const std::vector<float>& host) {
  void* p = nullptr;
  cudaMalloc(&p, host.size() * sizeof(float));
  cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  return View(static_cast<std::byte*>(p), host.size(), DType::kF32);
}

TEST(Nccl, CollectivesMatchTheirDefinitionOnEveryDevice) {
  const int n = Devices();
  if (n == 0) GTEST_SKIP() << "no CUDA device";
  RunGroup(n, [n](int r, NcclCommunicator& comm) {
    const size_t count = 1000 * static_cast<size_t>(n) + 1;  // uneven shards when n > 1
    std::vector<float> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = static_cast<float>(r + 1) * static_cast<float>(i);
    View buf = Device(x);
    comm.AllReduce(buf, ReduceOp::kSum);
    const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
    std::vector<float> got = OnDevice(buf);
    for (size_t i = 0; i < count; i += 97) EXPECT_FLOAT_EQ(got[i], ranks_sum * i) << i;

    const Range mine = ShardOf(count, n, r);
    View in = Device(x), shard = Device(std::vector<float>(mine.count));
    comm.ReduceScatter(in, shard, ReduceOp::kAvg);
    got = OnDevice(shard);
    for (size_t i = 0; i < mine.count; i += 31) {
      EXPECT_FLOAT_EQ(got[i], ranks_sum / n * static_cast<float>(mine.begin + i)) << i;
    }
    View all = Device(std::vector<float>(count));
    comm.AllGather(shard, all);
    got = OnDevice(all);
    for (size_t i = 0; i < count; i += 53) EXPECT_FLOAT_EQ(got[i], ranks_sum / n * i) << i;
    comm.Broadcast(buf, 0);
    comm.Barrier();
    for (View v : {buf, in, shard, all}) cudaFree(v.data);
  });
}

TEST(Nccl, AnAbortedGroupFailsAtOnceWithTheReason) {
  if (Devices() == 0) GTEST_SKIP() << "no CUDA device";
  RunGroup(1, [](int, NcclCommunicator& comm) {
    comm.Abort("the test gave up");
    View buf = Device(std::vector<float>(4));
    try {
      comm.AllReduce(buf, ReduceOp::kSum);
      ADD_FAILURE() << "expected CommError";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("the test gave up"), std::string::npos) << e.what();
    }
    cudaFree(buf.data);
  });
}

TEST(Nccl, WithoutADeviceConstructionIsACommErrorNamingTheDevice) {
  if (Devices() > 0) GTEST_SKIP() << "a CUDA device is present";
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  NcclOptions o;
  o.store = std::make_shared<TcpStore>("127.0.0.1", server.port(), kSecret);
  o.prefix = "test";
  try {
    NcclCommunicator comm(o);
    FAIL() << "expected CommError";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("device 0 is not usable"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fmstack::comm
