// The fused allreduce + residual add + RMSNorm (peerlink/fused.h) on GPUs, with fused_harness.h's
// checks (residual_out bitwise, norm_out within an ulp, quant_out the nearest e4m3, every rank the
// same bits, two runs the same bits). Runs when PEERLINK_TEST_GPUS >= 2; ranks on
// PEERLINK_TEST_DEVICES (default "0,1"; "0,0": two processes on GPU 0; "0,1,0,1": four ranks):
//   PEERLINK_TEST_GPUS=2 PEERLINK_TEST_DEVICES=0,0 build-cuda/bin/peerlink_tests --gtest_filter='FusedGpu.*'
// FusedThreadsGpu runs two ranks as threads of this process on the first device (the benchmarks'
// --threads stand-in):
//   PEERLINK_TEST_GPUS=2 PEERLINK_TEST_DEVICES=0 CUDA_MODULE_LOADING=EAGER build-cuda/bin/peerlink_tests
//     --gtest_filter='FusedThreadsGpu.*'
// Paths: by default LL (up to 512 KB), LL128 (to 4 MB where every pair is NVLink or one GPU) and the
// flag one-shot beyond; allreduce_ll_max = 0 leaves LL128 and the flag kernel; both 0 the flag
// kernel alone (256 KB scratch positions: steps of 16 rows of 8192); fused_algo twoshot the two-shot.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "collectives/gpu_gate.h"
#include "fused_harness.h"
#include "gpu/runtime.h"
#include "support/mp.h"

namespace {

using namespace pltest;
using namespace pltest::coll;
using peerlink::Communicator;
using peerlink::Options;
namespace gpu = peerlink::gpu;

struct Config {
  const char* name;
  const char* algo;
  size_t ll_max, ll128_max, scratch;
};
const Config kAuto{"auto", "", size_t(512) << 10, size_t(4) << 20, 0};
const Config kLl128{"ll128", "", 0, size_t(4) << 20, 0};
const Config kFlag{"flag", "", 0, 0, size_t(256) << 10};
const Config kTwoShot{"twoshot", "twoshot", size_t(512) << 10, size_t(4) << 20, size_t(256) << 10};

Options opts(const Config& c) {
  Options o = Options::from_env();
  o.fused_algo = peerlink::parse_allreduce_algo(c.algo);
  o.allreduce_ll_max = c.ll_max;
  o.allreduce_ll128_max = c.ll128_max;
  o.allreduce_scratch_bytes = c.scratch;
  o.timeout = std::chrono::milliseconds(60000);
  return o;
}

Mem device_mem(Communicator& comm, gpu::Stream s) {
  Mem m;
  m.alloc = [](size_t n) { return gpu::device_malloc(n ? n : 1); };
  m.release = [](void* p) { gpu::device_free(p); };
  m.put = [](void* d, const void* h, size_t n) { gpu::memcpy_sync(d, h, n); };
  m.get = [](void* h, const void* d, size_t n) { gpu::memcpy_sync(h, d, n); };
  m.sync = [&comm, s] {
    gpu::stream_sync(s);
    peerlink::allreduce_check(comm);
  };
  m.stream = s;
  return m;
}

std::vector<FusedCase> matrix(const std::vector<size_t>& tokens, const std::vector<size_t>& hiddens,
                              const std::vector<DataType>& types, uint64_t seed) {
  std::vector<FusedCase> out;
  for (DataType t : types)
    for (size_t h : hiddens)
      for (size_t n : tokens) {
        FusedCase c;
        c.t = t;
        c.tokens = n;
        c.hidden = h;
        const size_t i = out.size();
        c.weight_bias = i % 2 ? 1.f : 0.f;
        c.in_place = i % 3 == 1;
        c.fp8 = i % 4 >= 2;
        c.seed = seed + i;
        out.push_back(c);
      }
  return out;
}

// Every case of every (config, cases) pair on the ranks of PEERLINK_TEST_DEVICES, one process each.
void correctness(const std::vector<std::pair<Config, std::vector<FusedCase>>>& runs, const char* tag) {
  const std::vector<int> devs = gpu_test_devices();
  const int world = int(devs.size());
  int total = 0;
  for (const auto& r : runs) total += int(r.second.size());
  HashTable hashes(world, total);
  const std::string uid = unique_test_id(tag);
  std::string fail = run_ranks(world, [&](int rank) {
    gpu::set_device(devs[rank]);
    int c = 0, k = 0;
    for (const auto& r : runs) {
      Communicator comm(uid + std::to_string(k++), rank, world, devs[rank], opts(r.first));
      gpu::Stream s = gpu::stream_create();
      Mem mem = device_mem(comm, s);
      for (const FusedCase& fc : r.second) hashes.put(rank, c++, run_fused_case(comm, mem, fc));
      gpu::stream_destroy(s);
    }
  }, std::chrono::milliseconds(600000));
  EXPECT_EQ(fail, "");
  EXPECT_EQ(hashes.mismatch(total), "");
}

const std::vector<DataType> kHalfAndF32 = {DataType::F16, DataType::F32};

TEST(FusedGpu, Correctness) {
  REQUIRE_GPUS();
  correctness({{kAuto, matrix({1, 7, 128, 1000}, {1024, 4096, 8192, 5128}, {DataType::BF16}, 100)},
               {kAuto, matrix({1, 128}, {1024, 5128}, kHalfAndF32, 200)},
               {kLl128, matrix({1, 7, 128}, {4096, 5128, 8192}, {DataType::BF16, DataType::F32}, 300)},
               {kFlag, matrix({1, 7, 128, 1000}, {1024, 8192}, {DataType::BF16}, 400)},
               {kFlag, matrix({7, 33}, {5128}, kHalfAndF32, 500)},
               {kTwoShot, matrix({1, 7, 128, 1000}, {1024, 8192}, {DataType::BF16}, 600)},
               {kTwoShot, matrix({7, 33}, {5128}, kHalfAndF32, 700)}},
              "fug");
}

// One graph per rank holding calls of every path (LL, LL128, flag one-shot, FP8), captured once and
// replayed with new inputs (and a new scale) before every replay.
TEST(FusedGpu, GraphCaptureAndReplays) {
  REQUIRE_GPUS();
  const std::vector<int> devs = gpu_test_devices();
  const int world = int(devs.size());
  const std::string uid = unique_test_id("fug-graph");
  std::string fail = run_ranks(world, [&](int rank) {
    gpu::set_device(devs[rank]);
    Communicator comm(uid, rank, world, devs[rank], opts(kAuto));
    gpu::Stream s = gpu::stream_create();
    Mem mem = device_mem(comm, s);
    std::vector<FusedCase> cases = matrix({1, 7, 128, 1000}, {8192}, {DataType::BF16}, 800);
    auto more = matrix({7}, {5128}, kHalfAndF32, 900);
    cases.insert(cases.end(), more.begin(), more.end());
    struct Bufs {
      Buf in, res, w, norm, rout, q, scale;
    };
    std::vector<std::unique_ptr<Bufs>> bufs;
    for (FusedCase& c : cases) {
      c.in_place = false;
      const size_t count = c.tokens * c.hidden, b = count * peerlink::dtype_size(c.t);
      bufs.emplace_back(new Bufs{Buf(mem, b, 0), Buf(mem, b, 0), Buf(mem, c.hidden * 4, 0), Buf(mem, b, 0),
                                 Buf(mem, b, 0), Buf(mem, count, 0), Buf(mem, 4, 0)});
    }
    auto call = [&](size_t i) {
      const FusedCase& c = cases[i];
      Bufs& B = *bufs[i];
      if (c.fp8)
        peerlink::allreduce_add_rmsnorm_fp8(comm, B.in.p, B.res.p, B.w.p, B.norm.p, B.rout.p, B.q.p,
                                            static_cast<const float*>(B.scale.p), c.tokens, c.hidden, c.t, kFusedEps,
                                            c.weight_bias, s);
      else
        peerlink::allreduce_add_rmsnorm(comm, B.in.p, B.res.p, B.w.p, B.norm.p, B.rout.p, c.tokens, c.hidden, c.t,
                                        kFusedEps, c.weight_bias, s);
    };
    auto put_inputs = [&](size_t i, uint64_t seed) {
      FusedCase c = cases[i];
      const size_t count = c.tokens * c.hidden;
      mem.put(bufs[i]->in.p, fused_values(c.t, count, seed, rank).data(), count * peerlink::dtype_size(c.t));
      mem.put(bufs[i]->res.p, fused_values(c.t, count, seed, -1).data(), count * peerlink::dtype_size(c.t));
      mem.put(bufs[i]->w.p, fused_values(c.t, c.hidden, seed, -2).data(), c.hidden * peerlink::dtype_size(c.t));
      mem.put(bufs[i]->scale.p, &kFusedScale, sizeof(float));
    };
    for (size_t i = 0; i < cases.size(); ++i) put_inputs(i, cases[i].seed);
    for (size_t i = 0; i < cases.size(); ++i) call(i);  // eager first: sets the collectives up
    mem.sync();
    gpu::stream_begin_capture(s);
    for (size_t i = 0; i < cases.size(); ++i) call(i);
    gpu::GraphExec g = gpu::stream_end_capture(s);
    for (int rep = 0; rep < 5; ++rep) {
      for (size_t i = 0; i < cases.size(); ++i) put_inputs(i, cases[i].seed + 1000 * (rep + 1));
      gpu::graph_launch(g, s);
      mem.sync();
      for (size_t i = 0; i < cases.size(); ++i) {
        FusedCase c = cases[i];
        c.seed += 1000 * (rep + 1);
        check_fused(c, world, bufs[i]->norm.read(), bufs[i]->rout.read(), bufs[i]->q.read(),
                    "replay " + std::to_string(rep) + " " + c.what(world));
      }
    }
    gpu::graph_destroy(g);
    bufs.clear();
    gpu::stream_destroy(s);
  }, std::chrono::milliseconds(300000));
  EXPECT_EQ(fail, "");
}

// Device memory for the threads form: one allocation per rank made before the first collective and
// freed after the last (cudaFree waits for the whole device, i.e. for the other rank's spinning
// kernel), handed out to the harness's buffers and reused case after case.
struct Arena {
  char* base = nullptr;
  size_t cap = 0, used = 0;
  int live = 0;
};
Mem arena_mem(Arena& a, Communicator& comm, gpu::Stream s) {
  Mem m = device_mem(comm, s);
  m.alloc = [&a](size_t n) -> void* {
    const size_t off = (a.used + 255) / 256 * 256;
    if (off + n > a.cap) throw std::runtime_error("test arena exhausted");
    a.used = off + n;
    ++a.live;
    return a.base + off;
  };
  m.release = [&a](void*) {
    if (--a.live == 0) a.used = 0;
  };
  return m;
}

TEST(FusedThreadsGpu, TwoRanksShareOneGpu) {
  REQUIRE_GPUS();
  const int dev = gpu_test_devices()[0];
  const std::string uid = unique_test_id("futh");
  const std::vector<std::pair<Config, std::vector<FusedCase>>> runs = {
      {kAuto, matrix({1, 7, 128, 1000}, {4096, 8192}, {DataType::BF16}, 1000)},
      {kAuto, matrix({7}, {5128}, kHalfAndF32, 1100)},
      {kTwoShot, matrix({7, 128}, {8192}, {DataType::BF16}, 1200)}};
  std::array<std::string, 2> err = run_thread_pair([&](int rank) {
    gpu::set_device(dev);
    Arena arena;
    arena.cap = size_t(96) << 20;
    arena.base = static_cast<char*>(gpu::device_malloc(arena.cap));
    struct Free {
      char* p;
      ~Free() { gpu::device_free(p); }
    } free_arena{arena.base};
    int k = 0;
    for (const auto& r : runs) {
      Communicator comm(uid + std::to_string(k++), rank, 2, dev, opts(r.first));
      gpu::Stream s = gpu::stream_create();
      Mem mem = arena_mem(arena, comm, s);
      for (const FusedCase& fc : r.second) run_fused_case(comm, mem, fc);
      comm.barrier();  // both ranks' kernels are done before either frees anything
      gpu::stream_destroy(s);
    }
  });
  EXPECT_EQ(err[0], "");
  EXPECT_EQ(err[1], "");
}

}  // namespace
