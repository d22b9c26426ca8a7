// One host thread driving the collectives of two ranks on two devices, as nccl-tests -g 2 does:
// each call's kernels on device 0 are enqueued before the peer's on device 1. A call of several
// kernels (the zero-copy path: an entry step that waits for the peers, the copy, an exit step)
// must not need its later kernels loaded then: under CUDA's lazy loading a first launch may
// synchronize the context, i.e. wait for the entry step, which waits for the peer's call that this
// thread has not issued yet. The reproduction: broadcast 4 MB (LL128) then 8 MB (zero
// copy, window registered), which timed out until the communicator preloaded those kernels
// (gpu::dev::preload). Runs in a forked child, so nothing is loaded before the communicators:
//   PEERLINK_TEST_GPUS=2 build-cuda/bin/peerlink_tests --gtest_filter='CollOneThreadGpu*'
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/gpu_gate.h"
#include "gpu/owners.h"
#include "gpu/runtime.h"
#include "peerlink/collectives.h"
#include "peerlink/communicator.h"
#include "peerlink/device.h"
#include "peerlink/windows.h"
#include "support/mp.h"

namespace {

using peerlink::Communicator;
using peerlink::DataType;
namespace gpu = peerlink::gpu;

constexpr size_t kMaxBytes = size_t(8) << 20;

struct Rank {
  int dev = 0;
  std::unique_ptr<Communicator> comm;
  char* buf = nullptr;
  uint64_t win = 0;
  gpu::StreamOwner stream;
};

// fn(rank) on two threads at once (what is collective: construction, window registration).
void both(const std::function<void(int)>& fn) {
  std::string err[2];
  auto run = [&](int r) {
    try {
      fn(r);
    } catch (const std::exception& e) {
      err[r] = e.what();
    }
  };
  std::thread t(run, 1);
  run(0);
  t.join();
  MP_CHECK_MSG(err[0].empty() && err[1].empty(), "rank 0: " << err[0] << " / rank 1: " << err[1]);
}

uint32_t word(size_t i, int salt) { return uint32_t(i * 2654435761u) ^ uint32_t(salt * 40503); }

}  // namespace

TEST(CollOneThreadGpu, ZeroCopyAfterLl128FromOneThread) {
  REQUIRE_GPUS();
  const std::string uid = pltest::unique_test_id("coll-1thr");
  std::string fail = pltest::run_ranks(1, [&](int) {
    peerlink::Options o = peerlink::Options::from_env();
    o.timeout = std::chrono::milliseconds(5000);  // a lazy-load deadlock ends here as a TimeoutError
    Rank rk[2];
    both([&](int r) {
      rk[r].dev = pltest::gpu_test_device(r);
      gpu::set_device(rk[r].dev);
      rk[r].comm = std::make_unique<Communicator>(uid, r, 2, rk[r].dev, o);
      rk[r].buf = static_cast<char*>(peerlink::device::alloc(kMaxBytes));
      rk[r].win = peerlink::register_window(*rk[r].comm, rk[r].buf, kMaxBytes);
      rk[r].stream = gpu::StreamOwner::create(rk[r].dev);
    });
    int salt = 0;
    // 4 MB: LL128 lines (pieces up to allreduce_ll128_max); 8 MB: the zero-copy path (window).
    for (size_t bytes : {size_t(4) << 20, kMaxBytes}) {
      ++salt;
      const size_t n = bytes / 4;
      std::vector<uint32_t> want(n), got(n, 0);
      for (size_t i = 0; i < n; ++i) want[i] = word(i, salt);
      gpu::set_device(rk[0].dev);
      gpu::memcpy_sync(rk[0].buf, want.data(), bytes);
      for (int r = 0; r < 2; ++r) {  // rank 0's call, then rank 1's, from this thread
        gpu::set_device(rk[r].dev);
        peerlink::broadcast(*rk[r].comm, rk[r].buf, rk[r].buf, n, DataType::I32, 0, rk[r].stream.get());
      }
      for (int r = 0; r < 2; ++r) {
        gpu::set_device(rk[r].dev);
        gpu::stream_sync(rk[r].stream.get());
        peerlink::allreduce_check(*rk[r].comm);  // a timed-out kernel is reported here
      }
      gpu::set_device(rk[1].dev);
      gpu::memcpy_sync(got.data(), rk[1].buf, bytes);
      for (size_t i = 0; i < n; ++i)
        MP_CHECK_MSG(got[i] == want[i], "broadcast of " << bytes << " bytes: word " << i << " is " << got[i]
                                                       << ", want " << want[i]);
    }
    both([&](int r) {
      gpu::set_device(rk[r].dev);
      peerlink::deregister_window(*rk[r].comm, rk[r].win);
      rk[r].stream = gpu::StreamOwner();
      peerlink::device::free(rk[r].buf);
      rk[r].comm.reset();
    });
  }, std::chrono::milliseconds(120000));
  EXPECT_EQ(fail, "");
}
