// Two ranks as threads of one process on one GPU (the single-GPU stand-in of the benchmarks'
// --threads, and any program that drives several ranks of one device from threads). Each rank's
// kernel spins for the other's, so both grids must be resident at once: the collectives' setup
// divides the GPU's multiprocessors between them (setup_record.h grid_agreement). With a full grid
// each, every staged size hung until the device timeout (one H200, session 26 calls 4-5). Buffers
// are allocated before the first call and freed after the last (cudaFree waits for the device,
// i.e. for the other rank's spinning kernel):
//   PEERLINK_TEST_GPUS=2 PEERLINK_TEST_DEVICES=0 build-cuda/bin/peerlink_tests --gtest_filter='CollThreadsGpu*'
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "collectives/gpu_gate.h"
#include "gpu/runtime.h"
#include "peerlink/collectives.h"
#include "peerlink/communicator.h"
#include "support/mp.h"

namespace {

using peerlink::Communicator;
using peerlink::DataType;
using peerlink::ReduceOp;
namespace gpu = peerlink::gpu;

// A two-thread barrier that gives up after the test's bound (a hung peer thread fails the test).
class Barrier {
 public:
  void wait() {
    const int gen = gen_.load();
    if (arrived_.fetch_add(1) == 1) {
      arrived_.store(0);
      gen_.fetch_add(1);
      return;
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (gen_.load() == gen) {
      if (std::chrono::steady_clock::now() > until) throw std::runtime_error("barrier: the other rank never came");
      std::this_thread::yield();
    }
  }

 private:
  std::atomic<int> arrived_{0}, gen_{0};
};

float value(size_t i, int rank) { return float(i % 13) + float(rank) + 1.0f; }

}  // namespace

TEST(CollThreadsGpu, TwoRanksShareOneGpuPastTheSmallSizes) {
  REQUIRE_GPUS();
  const int dev = pltest::gpu_test_devices()[0];
  const std::string uid = pltest::unique_test_id("gthr");
  // allreduce 64 MB (the bandwidth kernel), all_gather 2 x 16 MB and broadcast 32 MB (the push path).
  const size_t n_ar = size_t(16) << 20, n_ag = size_t(4) << 20, n_bc = size_t(8) << 20;
  Barrier barrier;
  std::string err[2];
  auto rank_fn = [&](int rank) {
    float *in = nullptr, *ar = nullptr, *ag = nullptr, *bc = nullptr;
    gpu::Stream s = nullptr;
    try {
      gpu::set_device(dev);
      peerlink::Options o = peerlink::Options::from_env();
      o.timeout = std::chrono::milliseconds(20000);
      Communicator comm(uid, rank, 2, dev, o);
      s = gpu::stream_create();
      std::vector<float> host(n_ar);
      for (size_t i = 0; i < n_ar; ++i) host[i] = value(i, rank);
      in = static_cast<float*>(gpu::device_malloc(n_ar * 4));
      ar = static_cast<float*>(gpu::device_malloc(n_ar * 4));
      ag = static_cast<float*>(gpu::device_malloc(2 * n_ag * 4));
      bc = static_cast<float*>(gpu::device_malloc(n_bc * 4));
      gpu::memcpy_sync(in, host.data(), n_ar * 4);
      peerlink::allreduce(comm, in, ar, 0, DataType::F32, ReduceOp::Sum, s);  // the setup, no kernel
      barrier.wait();
      for (int rep = 0; rep < 3; ++rep) {
        peerlink::allreduce(comm, in, ar, n_ar, DataType::F32, ReduceOp::Sum, s);
        peerlink::all_gather(comm, in, ag, n_ag, DataType::F32, s);
        peerlink::broadcast(comm, in, bc, n_bc, DataType::F32, 0, s);
      }
      gpu::stream_sync(s);
      peerlink::allreduce_check(comm);
      barrier.wait();
      std::vector<float> got(n_ar);
      gpu::memcpy_sync(got.data(), ar, n_ar * 4);
      for (size_t i = 0; i < n_ar; ++i)
        MP_CHECK_MSG(got[i] == value(i, 0) + value(i, 1), "allreduce element " << i << " is " << got[i]);
      gpu::memcpy_sync(got.data(), ag, 2 * n_ag * 4);
      for (size_t i = 0; i < 2 * n_ag; ++i)
        MP_CHECK_MSG(got[i] == value(i % n_ag, int(i / n_ag)), "all_gather element " << i << " is " << got[i]);
      gpu::memcpy_sync(got.data(), bc, n_bc * 4);
      for (size_t i = 0; i < n_bc; ++i) MP_CHECK_MSG(got[i] == value(i, 0), "broadcast element " << i << " is " << got[i]);
      barrier.wait();
    } catch (const std::exception& e) {
      err[rank] = e.what();
    }
    for (float* p : {in, ar, ag, bc})
      if (p) gpu::device_free(p);
    if (s) gpu::stream_destroy(s);
  };
  std::thread t(rank_fn, 1);
  rank_fn(0);
  t.join();
  EXPECT_EQ(err[0], "");
  EXPECT_EQ(err[1], "");
}

// The same pair, four bandwidth allreduces (16 MB: 1024-thread blocks, one per multiprocessor)
// captured into a graph per rank and replayed, rank 1 starting 100 ms after rank 0. Under
// programmatic dependent launch rank 0's first kernel (half the GPU, spinning for rank 1) lets its
// successor be scheduled at once, which takes the other half: rank 1's blocks find no room until
// the device timeout. The stand-in bench_allreduce -G 1 ran into that at 16 MB (one H200, session
// 27 call 3). Ranks that share a GPU launch without PDL (coll_state.cpp).
TEST(CollThreadsGpu, TwoRanksShareOneGpuGraphReplays) {
  REQUIRE_GPUS();
  const int dev = pltest::gpu_test_devices()[0];
  const std::string uid = pltest::unique_test_id("gthg");
  const size_t n = size_t(4) << 20;
  Barrier barrier;
  std::string err[2];
  auto rank_fn = [&](int rank) {
    float *in = nullptr, *out = nullptr;
    gpu::Stream s = nullptr;
    gpu::GraphExec g = nullptr;
    try {
      gpu::set_device(dev);
      peerlink::Options o = peerlink::Options::from_env();
      o.timeout = std::chrono::milliseconds(10000);
      Communicator comm(uid, rank, 2, dev, o);
      s = gpu::stream_create();
      std::vector<float> host(n);
      for (size_t i = 0; i < n; ++i) host[i] = value(i, rank);
      in = static_cast<float*>(gpu::device_malloc(n * 4));
      out = static_cast<float*>(gpu::device_malloc(n * 4));
      gpu::memcpy_sync(in, host.data(), n * 4);
      peerlink::allreduce(comm, in, out, 0, DataType::F32, ReduceOp::Sum, s);  // the setup, no kernel
      barrier.wait();
      gpu::stream_begin_capture(s);
      for (int k = 0; k < 4; ++k) peerlink::allreduce(comm, in, out, n, DataType::F32, ReduceOp::Sum, s);
      g = gpu::stream_end_capture(s);
      barrier.wait();
      if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      for (int rep = 0; rep < 3; ++rep) gpu::graph_launch(g, s);
      gpu::stream_sync(s);
      peerlink::allreduce_check(comm);
      barrier.wait();
      std::vector<float> got(n);
      gpu::memcpy_sync(got.data(), out, n * 4);
      for (size_t i = 0; i < n; ++i)
        MP_CHECK_MSG(got[i] == value(i, 0) + value(i, 1), "allreduce element " << i << " is " << got[i]);
      barrier.wait();
    } catch (const std::exception& e) {
      err[rank] = e.what();
    }
    if (g) gpu::graph_destroy(g);
    for (float* p : {in, out})
      if (p) gpu::device_free(p);
    if (s) gpu::stream_destroy(s);
  };
  std::thread t(rank_fn, 1);
  rank_fn(0);
  t.join();
  EXPECT_EQ(err[0], "");
  EXPECT_EQ(err[1], "");
}
