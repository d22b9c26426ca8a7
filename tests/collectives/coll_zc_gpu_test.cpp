// The zero-copy path of all_gather, all_to_all and broadcast on GPUs (peerlink/windows.h; copy
// engines between two flag kernels): recvbufs inside registered windows of device memory (plain
// cudaMalloc through peerlink::device::alloc, and Communicator::alloc), the path forced
// (PEERLINK_<COLLECTIVE>_ALGO=zero_copy), every kind (all_gather, all_to_all and broadcast in place too,
// broadcast from roots 0 and 1) x bf16 / f32 / i64 x counts 1, 7, 4097 and ~8 MB pieces, payloads
// and guard bytes checked (coll_harness.h) and compared across ranks, with the pushes by kernel and
// (~8 MB pieces, 2 ranks) by copy engine; a captured zero-copy
// all_gather (+ all_to_all) replayed 50 times with new inputs; and a window used at different
// offsets on different ranks (a broken contract) reported as InvalidArgument, not a hang.
// Runs only when PEERLINK_TEST_GPUS >= 2; rank r uses device PEERLINK_TEST_DEVICES[r] (default
// "0,1"; "0,1,0,1" runs 4 ranks on 2 GPUs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "collectives/coll_state.h"
#include "collectives/gpu_gate.h"
#include "device_window.h"
#include "coll_harness.h"
#include "gpu/runtime.h"
#include "peerlink/device.h"
#include "peerlink/windows.h"
#include "support/mp.h"

namespace {

using namespace pltest;
using namespace pltest::coll;
using peerlink::Communicator;
using peerlink::Options;
namespace gpu = peerlink::gpu;

Options zc_opts() {
  Options o = Options::from_env();
  o.all_gather_algo = o.all_to_all_algo = o.broadcast_algo = o.reduce_algo = o.reduce_scatter_algo = peerlink::CollAlgo::ZeroCopy;
  o.timeout = std::chrono::milliseconds(60000);
  return o;
}

// The harness's buffers carved out of the window, stack-wise: run_case allocates and releases in
// the same order with the same sizes on every rank, so every rank's recvbuf is at the same offset
// of the window (the symmetric contract).
Mem window_mem(Communicator& comm, DeviceWindow& w, gpu::Stream s, size_t* top) {
  Mem m;
  m.alloc = [&w, top](size_t n) {
    size_t at = *top;
    size_t next = at + (std::max<size_t>(n, 1) + 4095) / 4096 * 4096;
    MP_CHECK_MSG(next <= w.bytes, "window of " << w.bytes << " bytes too small for " << next);
    *top = next;
    return static_cast<void*>(w.base + at);
  };
  m.release = [&w, top](void* p) { *top = static_cast<size_t>(static_cast<char*>(p) - w.base); };
  m.put = [](void* d, const void* h, size_t n) { gpu::memcpy_sync(d, h, n); };
  m.get = [](void* h, const void* d, size_t n) { gpu::memcpy_sync(h, d, n); };
  m.sync = [&comm, s] {
    gpu::stream_sync(s);
    peerlink::allreduce_check(comm);
  };
  m.stream = s;
  return m;
}

const DataType kTypes[] = {DataType::BF16, DataType::F32, DataType::I64};
const size_t kBigPiece = (size_t(8) << 20) + 40;  // ~8 MB pieces (an odd count in every type)
size_t count_of(size_t c, DataType t) { return c ? c : kBigPiece / peerlink::dtype_size(t); }
const size_t kCounts[] = {1, 7, 4097, 0};  // 0: the ~8 MB piece

struct Case {
  Kind k;
  bool in_place;
  int root;
  ReduceOp op = ReduceOp::Sum;
};
// The reducing kinds read the peers' sendbufs through the window (harness buffers are all in it).
const std::vector<Case> kCases = {{Kind::AllGather, false, 0},         {Kind::AllGather, true, 0},
                                  {Kind::AllToAll, false, 0},          {Kind::AllToAll, true, 0},
                                  {Kind::Broadcast, false, 0},
                                  {Kind::Broadcast, true, 0},          {Kind::Broadcast, false, 1},
                                  {Kind::Broadcast, true, 1},          {Kind::Reduce, false, 0, ReduceOp::Sum},
                                  {Kind::Reduce, true, 1, ReduceOp::Max}, {Kind::ReduceScatter, false, 0, ReduceOp::Sum},
                                  {Kind::ReduceScatter, true, 0, ReduceOp::Min},
                                  {Kind::ReduceScatter, false, 0, ReduceOp::Avg}};

// Every case of kCases x kTypes x kCounts, in both kinds of window, under `opts`.
void every_case(const char* tag, const Options& opts) {
  const std::vector<int> devs = gpu_test_devices();
  const int world = int(devs.size());
  const int cases = int(2 * kCases.size() * std::size(kTypes) * std::size(kCounts));
  HashTable hashes(world, cases);
  std::string uid = unique_test_id(tag);
  std::string fail = run_ranks(world, [&](int rank) {
    gpu::set_device(devs[rank]);
    Communicator comm(uid, rank, world, devs[rank], opts);
    gpu::Stream s = gpu::stream_create();
    // all_to_all needs 2 x world pieces (+ guards), all_gather world + 1.
    const size_t window_bytes = (2 * world + 2) * (kBigPiece + 8192);
    int c = 0;
    for (bool from_comm : {false, true}) {
      DeviceWindow w(comm, from_comm, window_bytes);
      MP_CHECK_MSG(w.id > 0, "window id 0");
      MP_CHECK_MSG(peerlink::window_zero_copy(comm, w.base, w.bytes),
                   (from_comm ? "comm.alloc" : "device::alloc") << " window is not zero-copy capable");
      MP_CHECK_MSG(!peerlink::window_zero_copy(comm, w.base + w.bytes - 8, 16), "a range past the window is zero-copy");
      size_t top = 0;
      Mem mem = window_mem(comm, w, s, &top);
      for (const Case& k : kCases)
        for (DataType t : kTypes)
          for (size_t cnt : kCounts) {
            const size_t m = count_of(cnt, t);
            const int root = k.root % world;
            std::string what = std::string(kind_name(k.k)) + " zero-copy " + (from_comm ? "comm.alloc" : "device::alloc") +
                               " window " + peerlink::to_string(t) + " count " + std::to_string(m) + " world " +
                               std::to_string(world) + " root " + std::to_string(root) + (k.in_place ? " in place" : "");
            hashes.put(rank, c, run_case(comm, mem, k.k, t, k.op, m, root, k.in_place, 47000 + c, what));
            MP_CHECK_MSG(top == 0, what << ": buffers not released");
            ++c;
          }
    }
    gpu::stream_destroy(s);
    MP_CHECK_MSG(c == cases, "ran " << c << " cases, expected " << cases);
  }, std::chrono::milliseconds(600000));
  EXPECT_EQ(fail, "");
  EXPECT_EQ(hashes.mismatch(cases), "");
}

TEST(CollZcGpu, ForcedZeroCopyEveryKindTypeAndSize) {
  REQUIRE_GPUS();
  Options o = zc_opts();
  o.coll_zero_copy_ce_min = 0;  // the copy kernel at every size
  every_case("gczc", o);
}

// The same cases with the pushes of ~8 MB pieces on the copy engines (Options::coll_zero_copy_ce_min,
// 2 ranks; more ranks keep the kernel, and must pass the same way).
TEST(CollZcGpu, CopyEnginesBySize) {
  REQUIRE_GPUS();
  Options o = zc_opts();
  o.coll_zero_copy_ce_min = size_t(1) << 20;
  every_case("gczc-ce", o);
}

// One graph: a zero-copy all_gather and a zero-copy all_to_all into windows (Communicator::alloc),
// captured after one eager call, replayed 50 times with a new input before each replay.
// The 4 MB pieces take the copy engines when `ce_min` is at most 4 MB (2 ranks).
void graph_replays(const char* tag, size_t ce_min) {
  const std::vector<int> devs = gpu_test_devices();
  const int world = int(devs.size());
  std::string uid = unique_test_id(tag);
  Options o = zc_opts();
  o.coll_zero_copy_ce_min = ce_min;
  std::string fail = run_ranks(world, [&](int rank) {
    gpu::set_device(devs[rank]);
    Communicator comm(uid, rank, world, devs[rank], o);
    gpu::Stream s = gpu::stream_create();
    for (size_t n : {size_t(1001), size_t(1) << 20}) {  // 4 KB and 4 MB pieces of int32
      const size_t b = n * 4;
      DeviceWindow ag(comm, true, world * b), a2a(comm, true, world * b);
      void* in = peerlink::device::alloc(world * b);  // the input: outside every window
      auto val = [](int rep, int r, size_t i) { return int32_t((rep * 131 + r * 17 + int(i)) % 100003 + 1); };
      std::vector<int32_t> h(world * n), out(world * n);
      auto fill = [&](int rep) {
        for (size_t i = 0; i < world * n; ++i) h[i] = val(rep, rank, i);
        gpu::memcpy_sync(in, h.data(), world * b);
      };
      auto run_all = [&] {
        peerlink::all_gather(comm, in, ag.base, n, DataType::I32, s);
        peerlink::all_to_all(comm, in, a2a.base, n, DataType::I32, s);
      };
      auto check = [&](int rep) {
        gpu::stream_sync(s);
        peerlink::allreduce_check(comm);
        gpu::memcpy_sync(out.data(), ag.base, world * b);
        for (int r = 0; r < world; ++r)
          for (size_t i = 0; i < n; ++i)
            MP_CHECK_MSG(out[r * n + i] == val(rep, r, i), "replay " << rep << " all_gather n " << n << " rank " << r << " i " << i);
        gpu::memcpy_sync(out.data(), a2a.base, world * b);
        for (int r = 0; r < world; ++r)
          for (size_t i = 0; i < n; ++i)
            MP_CHECK_MSG(out[r * n + i] == val(rep, r, rank * n + i), "replay " << rep << " all_to_all n " << n << " rank " << r);
      };
      fill(0);
      run_all();  // eager first
      check(0);
      gpu::stream_begin_capture(s);
      run_all();
      gpu::GraphExec g = gpu::stream_end_capture(s);
      for (int rep = 1; rep <= 50; ++rep) {
        fill(rep);  // the previous replay finished (check synced the stream)
        gpu::graph_launch(g, s);
        check(rep);
      }
      gpu::graph_destroy(g);
      peerlink::device::free(in);
    }
    gpu::stream_destroy(s);
  }, std::chrono::milliseconds(300000));
  EXPECT_EQ(fail, "");
}

TEST(CollZcGpu, GraphCaptureReplays) {
  REQUIRE_GPUS();
  graph_replays("gczc-graph", 0);
}

TEST(CollZcGpu, GraphCaptureReplaysCopyEngines) {
  REQUIRE_GPUS();
  graph_replays("gczc-graph-ce", size_t(1) << 20);
}

// Plain device buffers (no window) in captured collectives (Options::coll_graph_register, default
// on): all_gather and all_to_all (auto: 1 MB pieces over coll_zero_copy_min) and reduce_scatter
// (zero-copy forced: it pulls from the plain sendbuf) get windows at capture (the communicator's
// first collectives: its setup runs inside the capture too); a second graph over
// the same buffers reuses them; both graphs replay with new inputs every time, checked; the windows
// go once both graphs are destroyed (at the next collective).
TEST(CollZcGpu, GraphRegistersPlainBuffers) {
  REQUIRE_GPUS();
  const std::vector<int> devs = gpu_test_devices();
  const int world = int(devs.size());
  std::string uid = unique_test_id("gczc-graphreg");
  std::string fail = run_ranks(world, [&](int rank) {
    gpu::set_device(devs[rank]);
    Options o = Options::from_env();
    o.coll_zero_copy_min = size_t(1) << 20;
    o.reduce_scatter_algo = peerlink::CollAlgo::ZeroCopy;
    o.timeout = std::chrono::milliseconds(60000);
    Communicator comm(uid, rank, world, devs[rank], o);
    gpu::Stream s = gpu::stream_create();
    const size_t n = size_t(1) << 18, b = n * 4;  // 1 MB pieces of int32
    auto* in = static_cast<char*>(peerlink::device::alloc(world * b));
    auto* ag = static_cast<char*>(peerlink::device::alloc(world * b));
    auto* a2a = static_cast<char*>(peerlink::device::alloc(world * b));
    auto* rs = static_cast<char*>(peerlink::device::alloc(b));
    auto windows = [&] {
      auto st = peerlink::coll::coll_state_if_set(comm);
      return st ? st->graph_windows().wins.size() : size_t(0);
    };
    auto val = [](int rep, int r, size_t i) { return int32_t((rep * 131 + r * 17 + int(i)) % 100003 + 1); };
    std::vector<int32_t> h(world * n), out(world * n);
    auto capture = [&] {
      gpu::stream_begin_capture(s);
      peerlink::all_gather(comm, in, ag, n, DataType::I32, s);
      peerlink::all_to_all(comm, in, a2a, n, DataType::I32, s);
      peerlink::reduce_scatter(comm, in, rs, n, DataType::I32, ReduceOp::Sum, s);
      return gpu::stream_end_capture(s);
    };
    auto replay_and_check = [&](gpu::GraphExec g, int rep) {
      for (size_t i = 0; i < world * n; ++i) h[i] = val(rep, rank, i);
      gpu::memcpy_sync(in, h.data(), world * b);
      gpu::graph_launch(g, s);
      gpu::stream_sync(s);
      peerlink::allreduce_check(comm);
      gpu::memcpy_sync(out.data(), ag, world * b);
      for (int r = 0; r < world; ++r)
        for (size_t i = 0; i < n; i += 97)
          MP_CHECK_MSG(out[r * n + i] == val(rep, r, i), "replay " << rep << " all_gather rank " << r << " i " << i);
      gpu::memcpy_sync(out.data(), a2a, world * b);
      for (int r = 0; r < world; ++r)
        for (size_t i = 0; i < n; i += 97)
          MP_CHECK_MSG(out[r * n + i] == val(rep, r, rank * n + i), "replay " << rep << " all_to_all rank " << r);
      gpu::memcpy_sync(out.data(), rs, b);
      for (size_t i = 0; i < n; i += 97) {
        int32_t want = 0;
        for (int r = 0; r < world; ++r) want += val(rep, r, rank * n + i);
        MP_CHECK_MSG(out[i] == want, "replay " << rep << " reduce_scatter i " << i << ": " << out[i] << " != " << want);
      }
    };
    // The communicator's first collective is the captured one: its setup runs during the capture.
    gpu::GraphExec g1 = capture();
    MP_CHECK_MSG(windows() == 3, windows() << " graph windows after the first capture (3 buffers)");
    gpu::GraphExec g2 = capture();
    MP_CHECK_MSG(windows() == 3, windows() << " graph windows after a second capture of the same buffers");
    for (int rep = 0; rep < 40; ++rep) replay_and_check(rep % 2 ? g2 : g1, rep);
    gpu::graph_destroy(g1);
    replay_and_check(g2, 40);
    MP_CHECK_MSG(windows() == 3, "windows went while a graph still holds them");
    gpu::graph_destroy(g2);
    // The graphs' references drop on a runtime thread; the next collective releases the windows.
    std::vector<int32_t> one(1, rank + 1);
    void* d1 = peerlink::device::alloc(4 * world + 4);
    for (int i = 0; i < 200 && windows() != 0; ++i) {
      gpu::memcpy_sync(d1, one.data(), 4);
      peerlink::all_gather(comm, d1, static_cast<char*>(d1) + 4, 1, DataType::I32, s);
      gpu::stream_sync(s);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    MP_CHECK_MSG(windows() == 0, windows() << " graph windows left after both graphs were destroyed");
    peerlink::device::free(d1);
    for (char* p : {in, ag, a2a, rs}) peerlink::device::free(p);
    gpu::stream_destroy(s);
  }, std::chrono::milliseconds(300000));
  EXPECT_EQ(fail, "");
}

// The contract broken: rank 0 passes its recvbuf at offset 0 of the window, the others at 4096.
// Every rank must get InvalidArgument (from the call, its check, or the next call) and nothing
// may hang; bytes outside the windows stay untouched (the guard buffer after each window).
TEST(CollZcGpu, MismatchedOffsetsAreInvalidArgument) {
  REQUIRE_GPUS();
  const std::vector<int> devs = gpu_test_devices();
  const int world = int(devs.size());
  std::string uid = unique_test_id("gczc-bad");
  std::string fail = run_ranks(world, [&](int rank) {
    gpu::set_device(devs[rank]);
    Communicator comm(uid, rank, world, devs[rank], zc_opts());
    gpu::Stream s = gpu::stream_create();
    const size_t n = 65536, b = n * 4;
    // One allocation: the window, then 64 KB of guard right after it.
    const size_t win_bytes = world * b + 4096, guard = 65536;
    char* mem = static_cast<char*>(peerlink::device::alloc(win_bytes + guard));
    std::vector<unsigned char> g(guard, 0x5A), back(guard);
    gpu::memcpy_sync(mem + win_bytes, g.data(), guard);
    uint64_t id = peerlink::register_window(comm, mem, win_bytes);
    void* in = peerlink::device::alloc(b);
    gpu::memset_sync(in, 1, b);
    char* recv = mem + (rank == 0 ? 0 : 4096);
    bool reported = false;
    std::string seen;
    for (int attempt = 0; attempt < 2 && !reported; ++attempt) {
      try {
        peerlink::all_gather(comm, in, recv, n, DataType::I32, s);
        gpu::stream_sync(s);
        peerlink::allreduce_check(comm);
      } catch (const peerlink::InvalidArgument& e) {
        reported = true;
        seen = e.what();
      }
    }
    MP_CHECK_MSG(reported, "rank " << rank << ": mismatched window offsets were not reported as InvalidArgument");
    gpu::stream_sync(s);
    gpu::memcpy_sync(back.data(), mem + win_bytes, guard);
    MP_CHECK_MSG(back == g, "rank " << rank << ": bytes after the window were written (" << seen << ")");
    try {
      peerlink::deregister_window(comm, id);
    } catch (const std::exception&) {  // the communicator may stay failed; teardown must not hang
    }
    peerlink::device::free(in);
    peerlink::device::free(mem);
    gpu::stream_destroy(s);
  }, std::chrono::milliseconds(180000));
  EXPECT_EQ(fail, "");
}

}  // namespace
