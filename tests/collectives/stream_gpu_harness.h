// Shared by the stream-ordered send/recv GPU tests (stream_p2p_gpu_test.cpp: correctness,
// stream_p2p_gpu_fail_test.cpp: failures): 2 ranks, device = rank, only when PEERLINK_TEST_GPUS >= 2.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/gpu_gate.h"
#include "gpu/runtime.h"
#include "peerlink/peerlink.h"
#include "support/mp.h"

namespace pltest::stream_gpu {

// `ranks` ranks (both by default) as threads of one forked child; the first failure of any thread is
// the result.
inline std::string run_thread_ranks(const std::function<void(int)>& fn,
                                    std::chrono::milliseconds limit = std::chrono::milliseconds(240000), int ranks = 2) {
  return run_ranks(
      1,
      [&](int) {
        std::mutex mu;
        std::string fail;
        std::vector<std::thread> t;
        for (int r = 0; r < ranks; ++r)
          t.emplace_back([&, r] {
            try {
              fn(r);
            } catch (const std::exception& e) {
              std::lock_guard<std::mutex> g(mu);
              if (fail.empty()) fail = "rank " + std::to_string(r) + ": " + e.what();
            }
          });
        for (auto& th : t) th.join();
        MP_CHECK_MSG(fail.empty(), fail);
      },
      limit);
}


inline peerlink::Options opts(int timeout_ms = 30000) {
  peerlink::Options o = peerlink::Options::from_env();
  o.timeout = std::chrono::milliseconds(timeout_ms);
  return o;
}

// Device buffer of n bytes (zeroed), filled and checked through a host copy.
struct Dev {
  char* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t bytes)
      : p(static_cast<char*>(peerlink::gpu::device_malloc(bytes ? bytes : 1))), n(bytes) {
    peerlink::gpu::memset_sync(p, 0, bytes ? bytes : 1);
  }
  ~Dev() { peerlink::gpu::device_free(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void fill(uint64_t tag) {
    std::vector<char> h(n);
    fill_pattern(h.data(), n, tag);
    peerlink::gpu::memcpy_sync(p, h.data(), n);
  }
  size_t check(size_t off, size_t len, uint64_t tag) const {
    std::vector<char> h(len);
    peerlink::gpu::memcpy_sync(h.data(), p + off, len);
    return check_pattern(h.data(), len, tag);
  }
  bool zero() const {
    std::vector<char> h(n);
    peerlink::gpu::memcpy_sync(h.data(), p, n);
    for (char c : h)
      if (c) return false;
    return true;
  }
};

// Checks the errors the kernels recorded (an empty group runs the check).
inline void poll(peerlink::Communicator& c) {
  c.group_start();
  c.group_end();
}

}  // namespace pltest::stream_gpu
