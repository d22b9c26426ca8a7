// The copy-engine path (coll_ce.cpp; reduce / reduce_scatter with their reduction kernel) and the
// auto-selection knobs on GPUs: every knob (chunk, lanes, thresholds) at sizes around its
// boundaries, every kind, with all_to_all_v (push kernel) and, in the auto configs, LL / push
// kernels interleaved on the same communicator so that the sequence numbers and scratch slots of
// both kinds of path follow each other; and a captured graph (copy engines, kernels and an
// allreduce between them) replayed with new inputs. Runs only when
// PEERLINK_TEST_GPUS >= 2; rank r uses device PEERLINK_TEST_DEVICES[r] (default "0,1"; "0,1,0,1"
// runs 4 ranks on 2 GPUs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "collectives/gpu_gate.h"
#include "coll_harness.h"
#include "gpu/runtime.h"
#include "support/mp.h"

namespace {

using namespace pltest;
using namespace pltest::coll;
using peerlink::Communicator;
using peerlink::Options;
namespace gpu = peerlink::gpu;



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

struct Config {
  const char* name;
  const char* algo;     // every kind's (all_to_all_v always pushes)
  size_t scratch;       // allreduce_scratch_bytes (0 = default)
  size_t chunk;         // coll_ce_chunk_bytes
  int lanes;            // coll_ce_lanes
  size_t ll_max;        // coll_ll_max
  size_t ce_min;        // coll_ce_min
  std::vector<size_t> bytes;  // piece sizes in bytes (count = bytes / element size, at least 1)
};

Options opts(const Config& c) {
  Options o = Options::from_env();
  o.all_gather_algo = o.broadcast_algo = o.all_to_all_algo = o.reduce_scatter_algo = o.reduce_algo = peerlink::parse_coll_algo(c.algo);
  o.allreduce_scratch_bytes = c.scratch;
  o.coll_ce_chunk_bytes = c.chunk;
  o.coll_ce_lanes = c.lanes;
  o.coll_ll_max = c.ll_max;
  o.coll_ce_min = c.ce_min;
  o.timeout = std::chrono::milliseconds(60000);
  return o;
}

const std::vector<Config> kConfigs = {
    // one chunk per call up to 16 MB pieces (2 ranks), one lane
    {"ce", "ce", 0, 0, 1, size_t(64) << 10, 0, {2, 6, 2002, 131074, 600002, 10000002}},
    // 64 KB chunks: 1, 2 and 3 steps around the boundary, two lanes
    {"ce-64k-2lanes", "ce", 0, 65536, 2, size_t(64) << 10, 0, {8, 65528, 65536, 65544, 131080, 600008}},
    // 1000-byte chunks (992 usable: 16-byte units) in 64 KB scratch, three lanes: many steps
    {"ce-1k-3lanes", "ce", 65536, 1000, 3, size_t(64) << 10, 0, {2, 984, 992, 1000, 40002}},
    // auto: LL up to 256 KB, copy engines from 256 KB (pieces just below / at / above), push never
    {"auto-ce256k", "", 0, 0, 2, size_t(256) << 10, size_t(256) << 10, {8, 262136, 262144, 262152, 4000000}},
    // auto: no LL at all, copy engines from 1 MB: push below
    {"auto-ll0-ce1m", "", 0, 0, 1, 0, size_t(1) << 20, {8, 1048560, 1048576, 1048592}},
};

const std::vector<Kind> kAll = {Kind::AllGather, Kind::ReduceScatter, Kind::Broadcast,
                                Kind::Reduce,    Kind::AllToAll,      Kind::AllToAllV};

TEST(CollCeGpu, KnobsAroundThresholds) {
  REQUIRE_GPUS();
  const std::vector<int> devs = gpu_test_devices();
  const int world = int(devs.size());
  const DataType types[] = {DataType::BF16, DataType::I32, DataType::F64};
  int cases = 0;
  for (const Config& c : kConfigs) cases += int(kAll.size() * std::size(types) * c.bytes.size());
  HashTable hashes(world, cases);
  std::string uid = unique_test_id("gcoce");
  std::string fail = run_ranks(world, [&](int rank) {
    gpu::set_device(devs[rank]);
    int c = 0, ci = 0;
    for (const Config& cfg : kConfigs) {
      Communicator comm(uid + std::to_string(ci++), rank, world, devs[rank], opts(cfg));
      gpu::Stream s = gpu::stream_create();
      Mem mem = device_mem(comm, s);
      for (Kind k : kAll)
        for (DataType t : types)
          for (size_t b : cfg.bytes) {
            size_t m = std::max<size_t>(1, b / peerlink::dtype_size(t));
            if (k == Kind::AllToAllV) m = std::min<size_t>(m, 300000);  // its counts go up to m per pair
            int root = c % world;
            bool in_place = c % 3 == 1 && k != Kind::AllToAllV;
            std::string what = std::string(kind_name(k)) + " config '" + cfg.name + "' " + peerlink::to_string(t) +
                               " count " + std::to_string(m) + " world " + std::to_string(world) + " root " +
                               std::to_string(root) + (in_place ? " in place" : "");
            hashes.put(rank, c, run_case(comm, mem, k, t, ReduceOp::Sum, m, root, in_place, 31000 + c, what));
            ++c;
          }
      gpu::stream_destroy(s);
    }
    MP_CHECK_MSG(c == cases, "ran " << c << " cases, expected " << cases);
  }, std::chrono::milliseconds(600000));
  EXPECT_EQ(fail, "");
  EXPECT_EQ(hashes.mismatch(cases), "");
}

// One graph: copy-engine all_gather, an LL allreduce (one sequence number: the next call's slot
// parity flips), copy-engine broadcast (in place on the root), reduce_scatter (sum) and reduce (max
// to rank 0) through copies and reduction kernels, copy-engine all_to_all; 64 KB chunks so the larger size takes 16 steps. Replayed with new inputs each time.
TEST(CollCeGpu, GraphCaptureAndReplays) {
  REQUIRE_GPUS();
  const std::vector<int> devs = gpu_test_devices();
  const int world = int(devs.size());
  std::string uid = unique_test_id("gcoce-graph");
  std::string fail = run_ranks(world, [&](int rank) {
    gpu::set_device(devs[rank]);
    Config cfg{"graph", "ce", 0, 65536, 2, size_t(64) << 10, 0, {}};
    Communicator comm(uid, rank, world, devs[rank], opts(cfg));
    gpu::Stream s = gpu::stream_create();
    const int root = world - 1;
    for (size_t n : {size_t(1001), size_t(1) << 18}) {  // 4 KB pieces (one step) and 1 MB (16 steps)
      const size_t b = n * 4, small = 257;
      Mem mem = device_mem(comm, s);
      Buf in(mem, world * b, 0), ag(mem, world * b, 0), rs(mem, b, 0), bc(mem, b, 0), a2a(mem, world * b, 0),
          ar(mem, small * 4, 0), rd(mem, b, 0);
      auto run_all = [&] {
        peerlink::all_gather(comm, in.p, ag.p, n, DataType::I32, s);
        peerlink::allreduce(comm, in.p, ar.p, small, DataType::I32, ReduceOp::Sum, s);
        peerlink::broadcast(comm, rank == root ? bc.p : in.p, bc.p, n, DataType::I32, root, s);
        peerlink::reduce_scatter(comm, in.p, rs.p, n, DataType::I32, ReduceOp::Sum, s);
        peerlink::reduce(comm, in.p, rd.p, n, DataType::I32, ReduceOp::Max, 0, s);
        peerlink::all_to_all(comm, in.p, a2a.p, n, DataType::I32, s);
      };
      auto val = [](int rep, int r, size_t i) { return int32_t((rep * 131 + r * 17 + int(i)) % 100003 + 1); };
      std::vector<int32_t> h(world * n), out(world * n);
      auto fill = [&](int rep) {
        for (size_t i = 0; i < world * n; ++i) h[i] = val(rep, rank, i);
        gpu::memcpy_sync(in.p, h.data(), world * b);
        if (rank == root) gpu::memcpy_sync(bc.p, h.data(), b);  // broadcast in place on the root
      };
      fill(0);
      run_all();  // first use sets the collectives up (outside the capture)
      mem.sync();
      gpu::stream_begin_capture(s);
      run_all();
      gpu::GraphExec g = gpu::stream_end_capture(s);
      for (int rep = 1; rep <= 20; ++rep) {
        fill(rep);
        gpu::graph_launch(g, s);
        mem.sync();
        gpu::memcpy_sync(out.data(), ag.p, world * b);
        for (int r = 0; r < world; ++r)
          for (size_t i = 0; i < n; ++i)
            MP_CHECK_MSG(out[r * n + i] == val(rep, r, i), "replay " << rep << " all_gather n " << n << " rank " << r << " i " << i);
        gpu::memcpy_sync(out.data(), ar.p, small * 4);
        for (size_t i = 0; i < small; ++i) {
          int32_t want = 0;
          for (int r = 0; r < world; ++r) want += val(rep, r, i);
          MP_CHECK_MSG(out[i] == want, "replay " << rep << " allreduce element " << i);
        }
        gpu::memcpy_sync(out.data(), bc.p, b);
        for (size_t i = 0; i < n; ++i)
          MP_CHECK_MSG(out[i] == val(rep, root, i), "replay " << rep << " broadcast n " << n << " i " << i);
        gpu::memcpy_sync(out.data(), rs.p, b);
        for (size_t i = 0; i < n; ++i) {
          int32_t want = 0;
          for (int r = 0; r < world; ++r) want += val(rep, r, rank * n + i);
          MP_CHECK_MSG(out[i] == want, "replay " << rep << " reduce_scatter element " << i);
        }
        if (rank == 0) {
          gpu::memcpy_sync(out.data(), rd.p, b);
          for (size_t i = 0; i < n; ++i) {
            int32_t want = val(rep, 0, i);
            for (int r = 1; r < world; ++r) want = std::max(want, val(rep, r, i));
            MP_CHECK_MSG(out[i] == want, "replay " << rep << " reduce element " << i);
          }
        }
        gpu::memcpy_sync(out.data(), a2a.p, world * b);
        for (int r = 0; r < world; ++r)
          for (size_t i = 0; i < n; ++i)
            MP_CHECK_MSG(out[r * n + i] == val(rep, r, rank * n + i), "replay " << rep << " all_to_all n " << n);
      }
      gpu::graph_destroy(g);
    }
    gpu::stream_destroy(s);
  }, std::chrono::milliseconds(300000));
  EXPECT_EQ(fail, "");
}

}  // namespace
