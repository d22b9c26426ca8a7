// Two ranks as threads of one process on one GPU (the single-GPU stand-in of the benchmarks'
// --threads, and any program that drives several ranks of one device from threads). Each rank's
// kernel spins for the other's, so both grids must be resident at once: the collectives' setup
// divides the GPU's multiprocessors between them (setup_record.h grid_agreement). With a full grid
// each, every staged size hung until the device timeout (one H200). Buffers
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

// One rank's side: its communicator on the shared device, a stream, and device buffers, the first
// (`in`) holding value(i, rank). Everything is allocated before the first kernel and freed after the
// last (cudaFree waits for the device, i.e. for the other rank's spinning kernel).
class RankSide {
 public:
  RankSide(const std::string& uid, int rank, int dev, int timeout_ms, size_t n_in)
      : dev_((gpu::set_device(dev), dev)), comm_(uid, rank, 2, dev, options(timeout_ms)) {
    s_ = gpu::stream_create();
    in_ = alloc(n_in);
    std::vector<float> host(n_in);
    for (size_t i = 0; i < n_in; ++i) host[i] = value(i, rank);
    gpu::memcpy_sync(in_, host.data(), n_in * 4);
    peerlink::allreduce(comm_, in_, in_, 0, DataType::F32, ReduceOp::Sum, s_);  // the setup, no kernel
  }
  ~RankSide() {
    for (float* p : bufs_) gpu::device_free(p);
    if (s_) gpu::stream_destroy(s_);
  }
  RankSide(const RankSide&) = delete;
  RankSide& operator=(const RankSide&) = delete;

  float* alloc(size_t n) {
    bufs_.push_back(static_cast<float*>(gpu::device_malloc(n * 4)));
    return bufs_.back();
  }
  // The first n floats of a device buffer, checked against want(i).
  template <typename Want>
  void check(const char* what, const float* dev_buf, size_t n, Want&& want) const {
    std::vector<float> got(n);
    gpu::memcpy_sync(got.data(), dev_buf, n * 4);
    for (size_t i = 0; i < n; ++i) MP_CHECK_MSG(got[i] == want(i), what << " element " << i << " is " << got[i]);
  }
  Communicator& comm() { return comm_; }
  gpu::Stream stream() const { return s_; }
  float* in() const { return in_; }

 private:
  static peerlink::Options options(int timeout_ms) {
    peerlink::Options o = peerlink::Options::from_env();
    o.timeout = std::chrono::milliseconds(timeout_ms);
    return o;
  }
  int dev_;  // set first: the device is current before the communicator is made
  Communicator comm_;
  gpu::Stream s_ = nullptr;
  std::vector<float*> bufs_;
  float* in_ = nullptr;
};

// Runs body(rank) on a thread for rank 1 and on this one for rank 0; the failures, by rank.
template <typename Body>
void two_threads(Body&& body) {
  std::string err[2];
  auto run = [&](int rank) {
    try {
      body(rank);
    } catch (const std::exception& e) {
      err[rank] = e.what();
    }
  };
  std::thread t(run, 1);
  run(0);
  t.join();
  EXPECT_EQ(err[0], "");
  EXPECT_EQ(err[1], "");
}

}  // namespace

TEST(CollThreadsGpu, TwoRanksShareOneGpuPastTheSmallSizes) {
  REQUIRE_GPUS();
  const int dev = pltest::gpu_test_devices()[0];
  const std::string uid = pltest::unique_test_id("gthr");
  // allreduce 64 MB (the bandwidth kernel), all_gather 2 x 16 MB and broadcast 32 MB (the push path).
  const size_t n_ar = size_t(16) << 20, n_ag = size_t(4) << 20, n_bc = size_t(8) << 20;
  Barrier barrier;
  two_threads([&](int rank) {
    RankSide r(uid, rank, dev, 20000, n_ar);
    float *ar = r.alloc(n_ar), *ag = r.alloc(2 * n_ag), *bc = r.alloc(n_bc);
    barrier.wait();
    for (int rep = 0; rep < 3; ++rep) {
      peerlink::allreduce(r.comm(), r.in(), ar, n_ar, DataType::F32, ReduceOp::Sum, r.stream());
      peerlink::all_gather(r.comm(), r.in(), ag, n_ag, DataType::F32, r.stream());
      peerlink::broadcast(r.comm(), r.in(), bc, n_bc, DataType::F32, 0, r.stream());
    }
    gpu::stream_sync(r.stream());
    peerlink::allreduce_check(r.comm());
    barrier.wait();
    r.check("allreduce", ar, n_ar, [](size_t i) { return value(i, 0) + value(i, 1); });
    r.check("all_gather", ag, 2 * n_ag, [&](size_t i) { return value(i % n_ag, int(i / n_ag)); });
    r.check("broadcast", bc, n_bc, [](size_t i) { return value(i, 0); });
    barrier.wait();
  });
}

// The same pair, four bandwidth allreduces (16 MB: 1024-thread blocks, one per multiprocessor)
// captured into a graph per rank and replayed, rank 1 starting 100 ms after rank 0. Under
// programmatic dependent launch rank 0's first kernel (half the GPU, spinning for rank 1) lets its
// successor be scheduled at once, which takes the other half: rank 1's blocks find no room until
// the device timeout. The stand-in bench_allreduce -G 1 ran into that at 16 MB (one H200);
// this test failed 2 of 2 runs while ranks that share a GPU launched with PDL (coll_state.cpp).
TEST(CollThreadsGpu, TwoRanksShareOneGpuGraphReplays) {
  REQUIRE_GPUS();
  const int dev = pltest::gpu_test_devices()[0];
  const std::string uid = pltest::unique_test_id("gthg");
  const size_t n = size_t(4) << 20;
  Barrier barrier;
  two_threads([&](int rank) {
    RankSide r(uid, rank, dev, 10000, n);
    float* out = r.alloc(n);
    barrier.wait();
    gpu::stream_begin_capture(r.stream());
    for (int k = 0; k < 4; ++k) peerlink::allreduce(r.comm(), r.in(), out, n, DataType::F32, ReduceOp::Sum, r.stream());
    gpu::GraphExec g = gpu::stream_end_capture(r.stream());
    struct GraphGuard {
      gpu::GraphExec g;
      ~GraphGuard() { gpu::graph_destroy(g); }
    } guard{g};
    barrier.wait();
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (int rep = 0; rep < 3; ++rep) gpu::graph_launch(g, r.stream());
    gpu::stream_sync(r.stream());
    peerlink::allreduce_check(r.comm());
    barrier.wait();
    r.check("allreduce", out, n, [](size_t i) { return value(i, 0) + value(i, 1); });
    barrier.wait();
  });
}
