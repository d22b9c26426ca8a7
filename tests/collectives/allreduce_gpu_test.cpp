// Allreduce on GPUs (2 ranks, device = rank). Runs only when PEERLINK_TEST_GPUS >= 2 (set by
// scripts/gpu_collectives.sh); the parent never touches the GPU runtime before forking.
// Buffers come from plain device allocations (not Communicator::alloc): any device memory works.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <thread>
#include <vector>

#include "collectives/coll_state.h"
#include "collectives/gpu_gate.h"
#include "allreduce_harness.h"
#include "gpu/runtime.h"
#include "peerlink/peerlink.h"
#include "support/mp.h"

namespace {

using namespace pltest;
using namespace pltest::coll;
using peerlink::Communicator;
using peerlink::Options;
namespace gpu = peerlink::gpu;


Options opts(const char* algo, int timeout_ms = 30000) { return allreduce_opts(algo, timeout_ms); }

// An algorithm plus optional tuning variables that select a kernel within it. Options are read
// from the environment when the Communicator is made (opts()), so a ScopedEnv must exist first.
struct Variant {
  const char* algo;
  const char* env = nullptr;  // "NAME=value[,NAME=value]"
  std::string name() const { return std::string(*algo ? algo : "auto") + (env ? std::string(" ") + env : ""); }
};
struct ScopedEnv {
  std::vector<std::string> keys;
  explicit ScopedEnv(const char* kvs) {
    std::string all = kvs ? kvs : "";
    for (size_t at = 0; at < all.size();) {
      size_t end = all.find(',', at);
      if (end == std::string::npos) end = all.size();
      std::string kv = all.substr(at, end - at);
      keys.push_back(kv.substr(0, kv.find('=')));
      setenv(keys.back().c_str(), kv.substr(kv.find('=') + 1).c_str(), 1);
      at = end + 1;
    }
  }
  ~ScopedEnv() {
    for (const auto& k : keys) unsetenv(k.c_str());
  }
};
// one-shot: LL lines up to 512 KB, LL128 lines to 4 MB, then the register kernel; LL128 from the
// first byte (LL off); the register kernel at every size (LL and LL128 off); LL then the generic
// loop (forced).
const Variant kVariants[] = {{"oneshot"},
                             {"oneshot", "PEERLINK_ALLREDUCE_LL_MAX=0"},
                             {"oneshot", "PEERLINK_ALLREDUCE_LL_MAX=0,PEERLINK_ALLREDUCE_LL128_MAX=0"},
                             {"oneshot", "PEERLINK_ALLREDUCE_ONESHOT_GENERIC=1"},
                             {"twoshot"},
                             {"bandwidth"},
                             {""}};

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) { p = gpu::device_malloc(bytes ? bytes : 1); }
  ~DevBuf() { gpu::device_free(p); }
};

// Every dtype with sum/max/avg (f32 and bf16 with all ops), sizes from 1 element to multi-step.
TEST(AllreduceGpu, CorrectnessAllAlgos) {
  REQUIRE_GPUS();
  const std::vector<size_t> sizes = {1, 3, 1001, 4099, 65537, 300001, 9000001};
  const DataType types[] = {DataType::BF16, DataType::F32, DataType::F16, DataType::F64, DataType::I32, DataType::I64};
  // Per variant: (bf16, f32) x 5 ops + 4 types x 3 ops (sum, max, avg) = 22 combos x 6 sizes, + 4 sum
  // cases at 9M.
  const int kVariantCount = sizeof(kVariants) / sizeof(kVariants[0]);
  const int kCases = kVariantCount * (22 * 6 + 4);
  HashTable hashes(2, kCases);
  std::string uid = unique_test_id("gar");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    int c = 0;
    int vi = 0;
    for (const Variant& v : kVariants) {
      const char* algo = v.algo;
      ScopedEnv env(v.env);
      Communicator comm(uid + std::to_string(vi++), rank, 2, pltest::gpu_test_device(rank), opts(algo));
      gpu::Stream s = gpu::stream_create();
      for (DataType t : types)
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod, ReduceOp::Avg}) {
          bool all_ops = t == DataType::F32 || t == DataType::BF16;
          if (!all_ops && (op == ReduceOp::Min || op == ReduceOp::Prod)) continue;
          for (size_t n : sizes) {
            if (n > 300001 && (op != ReduceOp::Sum || t == DataType::F64 || t == DataType::I64)) continue;
            size_t es = peerlink::dtype_size(t), bytes = n * es;
            std::vector<unsigned char> in(bytes), out(bytes);
            fill_input(in.data(), n, 500 + c, rank, t, op);
            DevBuf din(bytes), dout(bytes);
            gpu::memcpy_sync(din.p, in.data(), bytes);
            bool in_place = c % 2 == 1;
            void* dst = in_place ? din.p : dout.p;
            peerlink::allreduce(comm, din.p, dst, n, t, op, s);
            gpu::stream_sync(s);
            peerlink::allreduce_check(comm);
            gpu::memcpy_sync(out.data(), dst, bytes);
            std::string what = v.name() + " " + peerlink::to_string(t) + " " + peerlink::to_string(op) +
                               " count " + std::to_string(n) + (in_place ? " in place" : "");
            check_result(out.data(), n, 500 + c, 2, t, op, what);
            hashes.put(rank, c, fnv1a(out.data(), bytes) | 1);
            ++c;
          }
        }
      gpu::stream_destroy(s);
    }
    MP_CHECK_MSG(c == kCases, "ran " << c << " cases, expected " << kCases);
  }, std::chrono::milliseconds(240000));
  EXPECT_EQ(fail, "");
  EXPECT_EQ(hashes.mismatch(kCases), "");
}

// Back-to-back in-place f64 sums with no host sync in between: the value doubles every call, so a
// stale or early read gives a wrong power of two. Also across two streams used alternately.
void doubling(int rank, Communicator& comm, size_t n, int calls, bool two_streams, const std::string& what) {
  std::vector<double> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = double(1 + (i % 7)) * (rank + 1);  // sum over ranks: 3*(1+i%7)
  DevBuf d(n * 8);
  gpu::memcpy_sync(d.p, h.data(), n * 8);
  gpu::Stream s1 = gpu::stream_create(), s2 = gpu::stream_create();
  for (int k = 0; k < calls; ++k)
    peerlink::allreduce(comm, d.p, d.p, n, DataType::F64, ReduceOp::Sum, (two_streams && k % 2) ? s2 : s1);
  gpu::stream_sync(s1);
  gpu::stream_sync(s2);
  peerlink::allreduce_check(comm);
  gpu::memcpy_sync(h.data(), d.p, n * 8);
  for (size_t i = 0; i < n; ++i) {
    double want = std::ldexp(3.0 * double(1 + (i % 7)), calls - 1);
    MP_CHECK_MSG(h[i] == want, what << ": element " << i << " = " << h[i] << ", want " << want);
  }
  gpu::stream_destroy(s1);
  gpu::stream_destroy(s2);
}

TEST(AllreduceGpu, BackToBackAndTwoStreams) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("gar-b2b");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts(""));
    for (size_t n : {1, 1000, 65536, 1 << 20, 5 << 20}) {
      doubling(rank, comm, n, 1000, false, "one stream n=" + std::to_string(n));
      doubling(rank, comm, n, 1000, true, "two streams n=" + std::to_string(n));
    }
  }, std::chrono::milliseconds(240000));
  EXPECT_EQ(fail, "");
}

// LL128 lines (LL off, so they carry every size up to 4 MB): back-to-back in-place doublings at
// sizes around the 120-byte line and the warp store of 4 lines, on one stream and on two. The
// pair is NVLink or one GPU on every machine this runs on, so LL128 must be on, not skipped.
TEST(AllreduceGpu, Ll128LinesBackToBack) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("gar-ll128");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    ScopedEnv env("PEERLINK_ALLREDUCE_LL_MAX=0");
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts("oneshot"));
    // f64 elements: 1 word; 15 = one line; 60 = one warp store; 131072 = 1 MB; 524288 = 4 MB.
    for (size_t n : {1, 14, 15, 16, 59, 60, 61, 4097, 131072, 131073, 524288}) {
      doubling(rank, comm, n, 300, false, "LL128 one stream n=" + std::to_string(n));
      doubling(rank, comm, n, 300, true, "LL128 two streams n=" + std::to_string(n));
    }
    const peerlink::coll::CollState& st = peerlink::coll::coll_state(comm);
    MP_CHECK_MSG(st.ll128_max() == (size_t(4) << 20), "LL128 lines are off on this pair (ll128_max " << st.ll128_max() << ")");
  }, std::chrono::milliseconds(240000));
  EXPECT_EQ(fail, "");
}

// Captured allreduces replay correctly: sequence numbers advance on the device.
TEST(AllreduceGpu, GraphCapture) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("gar-graph");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    int vi = 0;
    for (const Variant& v : kVariants) {
      if (!*v.algo) continue;
      const char* algo = v.algo;
      ScopedEnv env(v.env);
      Communicator comm(uid + std::to_string(vi++), rank, 2, pltest::gpu_test_device(rank), opts(algo));
      size_t n = 100003;
      DevBuf in(n * 4), out(n * 4), dbl(n * 8);
      std::vector<float> h(n), r(n);
      std::vector<double> hd(n, 1.0 + rank);
      gpu::memcpy_sync(dbl.p, hd.data(), n * 8);
      gpu::Stream s = gpu::stream_create();
      peerlink::allreduce(comm, in.p, out.p, n, DataType::F32, ReduceOp::Sum, s);  // setup outside capture
      gpu::stream_sync(s);
      gpu::stream_begin_capture(s);
      peerlink::allreduce(comm, in.p, out.p, n, DataType::F32, ReduceOp::Sum, s);
      for (int k = 0; k < 4; ++k) peerlink::allreduce(comm, dbl.p, dbl.p, n, DataType::F64, ReduceOp::Sum, s);
      gpu::GraphExec g = gpu::stream_end_capture(s);
      for (int rep = 0; rep < 25; ++rep) {
        for (size_t i = 0; i < n; ++i) h[i] = float((rep * 13 + rank * 5 + int(i)) % 97 + 1);
        gpu::memcpy_sync(in.p, h.data(), n * 4);
        gpu::graph_launch(g, s);
        gpu::stream_sync(s);
        peerlink::allreduce_check(comm);
        gpu::memcpy_sync(r.data(), out.p, n * 4);
        for (size_t i = 0; i < n; ++i) {
          float want = float((rep * 13 + int(i)) % 97 + 1) + float((rep * 13 + 5 + int(i)) % 97 + 1);
          MP_CHECK_MSG(r[i] == want, v.name() << " replay " << rep << " element " << i << ": " << r[i] << " != " << want);
        }
      }
      gpu::memcpy_sync(hd.data(), dbl.p, n * 8);
      MP_CHECK_MSG(hd[n - 1] == std::ldexp(3.0, 99), v.name() << ": after 100 captured doublings " << hd[n - 1]);
      gpu::graph_destroy(g);
      gpu::stream_destroy(s);
    }
  }, std::chrono::milliseconds(120000));
  EXPECT_EQ(fail, "");
}

// A rank that skips a call: the other rank's kernel gives up after the timeout, the host reports it.
TEST(AllreduceGpu, DeviceTimeoutIsReported) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("gar-timeout");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts("", 500));
    DevBuf d(4096);
    gpu::Stream s = gpu::stream_create();
    peerlink::allreduce(comm, d.p, d.p, 1024, DataType::F32, ReduceOp::Max, s);
    gpu::stream_sync(s);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(3000));
      return;
    }
    auto t0 = std::chrono::steady_clock::now();
    peerlink::allreduce(comm, d.p, d.p, 1024, DataType::F32, ReduceOp::Max, s);
    gpu::stream_sync(s);
    MP_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(2500));
    MP_CHECK_THROWS(peerlink::allreduce_check(comm), peerlink::TimeoutError, "rank 1");
    MP_CHECK_THROWS(peerlink::allreduce(comm, d.p, d.p, 1024, DataType::F32, ReduceOp::Max, s),
                    peerlink::TimeoutError);
    gpu::stream_destroy(s);
  }, std::chrono::milliseconds(60000));
  EXPECT_EQ(fail, "");
}

}  // namespace

namespace {
// Buffers at odd element offsets (not 8- or 16-byte aligned): the byte-wise paths of every kernel.
TEST(AllreduceGpu, MisalignedBuffers) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("gar-misal");
  HashTable hashes(2, 16);
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    int c = 0;
    for (const char* algo : {"oneshot", "oneshot-ll128", "twoshot", "bandwidth"}) {
      const bool ll128 = std::string(algo) == "oneshot-ll128";  // LL128 lines from the first byte
      ScopedEnv env(ll128 ? "PEERLINK_ALLREDUCE_LL_MAX=0" : nullptr);
      Communicator comm(uid + algo, rank, 2, pltest::gpu_test_device(rank), opts(ll128 ? "oneshot" : algo));
      gpu::Stream s = gpu::stream_create();
      for (size_t n : {size_t(1), size_t(1001), size_t(200003)}) {
        std::vector<unsigned char> in(n * 2), out(n * 2);
        fill_input(in.data(), n, 900 + c, rank, DataType::BF16, ReduceOp::Sum);
        DevBuf din(n * 2 + 64), dout(n * 2 + 64);
        char* src = static_cast<char*>(din.p) + 2;   // 1 element in
        char* dst = static_cast<char*>(dout.p) + 6;  // 3 elements in
        gpu::memcpy_sync(src, in.data(), n * 2);
        peerlink::allreduce(comm, src, dst, n, DataType::BF16, ReduceOp::Sum, s);
        gpu::stream_sync(s);
        gpu::memcpy_sync(out.data(), dst, n * 2);
        check_result(out.data(), n, 900 + c, 2, DataType::BF16, ReduceOp::Sum,
                     std::string(algo) + " misaligned count " + std::to_string(n));
        hashes.put(rank, c, fnv1a(out.data(), n * 2) | 1);
        ++c;
      }
      gpu::stream_destroy(s);
    }
  }, std::chrono::milliseconds(60000));
  EXPECT_EQ(fail, "");
  EXPECT_EQ(hashes.mismatch(12), "");
}

// Small and quick: what scripts/gpu_collectives.sh runs under compute-sanitizer.
TEST(AllreduceGpu, SanitizerSmall) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("gar-san");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    const Variant variants[] = {{"oneshot"},
                                {"oneshot", "PEERLINK_ALLREDUCE_LL_MAX=0"},
                                {"oneshot", "PEERLINK_ALLREDUCE_LL_MAX=0,PEERLINK_ALLREDUCE_LL128_MAX=0"},
                                {"twoshot"}};
    int vi = 0;
    for (const Variant& v : variants) {
      ScopedEnv env(v.env);
      Communicator comm(uid + std::to_string(vi++), rank, 2, pltest::gpu_test_device(rank), opts(v.algo, 60000));
      size_t n = 1001;
      std::vector<float> h(n), r(n);
      DevBuf d(n * 4);
      gpu::Stream s = gpu::stream_create();
      for (int k = 0; k < 3; ++k) {
        for (size_t i = 0; i < n; ++i) h[i] = float(k + rank + 1 + int(i % 5));
        gpu::memcpy_sync(d.p, h.data(), n * 4);
        peerlink::allreduce(comm, d.p, d.p, n, DataType::F32, ReduceOp::Sum, s);
        gpu::stream_sync(s);
        gpu::memcpy_sync(r.data(), d.p, n * 4);
        for (size_t i = 0; i < n; ++i) MP_CHECK(r[i] == float(2 * (k + int(i % 5)) + 3));
      }
      gpu::stream_destroy(s);
    }
  }, std::chrono::milliseconds(120000));
  EXPECT_EQ(fail, "");
}
}  // namespace
