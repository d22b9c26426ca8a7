// all_gather, reduce_scatter, broadcast, reduce, all_to_all(v) on GPUs. Runs only when
// PEERLINK_TEST_GPUS >= 2 (as the allreduce GPU test). Rank r uses device
// PEERLINK_TEST_DEVICES[r] (comma list, default "0,1"): "0,1,0,1" runs 4 ranks on 2 GPUs (two
// processes per GPU, time-sliced) to check the >2-rank kernels. The parent never touches the GPU
// runtime before forking. Buffers are plain device allocations (any device memory works).
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
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



Options opts(const char* algo, size_t scratch = 0) {
  Options o = Options::from_env();
  o.allreduce_scratch_bytes = scratch;
  o.broadcast_algo = o.reduce_algo = peerlink::parse_coll_algo(algo);
  if (std::string(algo) != "two_hop")  // a path of the rooted kinds only (Options::validate)
    o.all_gather_algo = o.reduce_scatter_algo = o.all_to_all_algo = o.broadcast_algo;
  o.timeout = std::chrono::milliseconds(60000);
  return o;
}

// Device memory behind the harness's buffers; sync() waits for the stream and reports device errors.
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

const std::vector<Kind> kAll = {Kind::AllGather, Kind::ReduceScatter, Kind::Broadcast,
                                Kind::Reduce,    Kind::AllToAll,      Kind::AllToAllV};

struct Algo {
  const char* name;
  size_t scratch;
  std::vector<size_t> sizes;
};

// Every kind of `kinds` x dtype (reducing kinds: sum and max; bf16 and f32 with every op) x size, per
// algorithm.
void correctness(const std::vector<Algo>& algos, const std::vector<Kind>& kinds, const char* uid_prefix) {
  const std::vector<int> devs = gpu_test_devices();
  const int world = int(devs.size());
  const DataType types[] = {DataType::BF16, DataType::F32, DataType::F16, DataType::F64, DataType::I32, DataType::I64};
  const int kMaxCases = 4 * 6 * 6 * 4 * 7;
  HashTable hashes(world, kMaxCases);
  int cases = 0;
  for (const Algo& a : algos)
    for (Kind k : kinds)
      for (DataType t : types)
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod, ReduceOp::Avg}) {
          bool all_ops = t == DataType::F32 || t == DataType::BF16;
          if ((!is_reducing(k) && op != ReduceOp::Sum) || (!all_ops && (op == ReduceOp::Min || op == ReduceOp::Prod)))
            continue;
          cases += int(a.sizes.size());
        }
  std::string uid = unique_test_id(uid_prefix);
  std::string fail = run_ranks(world, [&](int rank) {
    gpu::set_device(devs[rank]);
    int c = 0, ai = 0;
    for (const Algo& a : algos) {
      Communicator comm(uid + std::to_string(ai++), rank, world, devs[rank], opts(a.name, a.scratch));
      gpu::Stream s = gpu::stream_create();
      Mem mem = device_mem(comm, s);
      for (Kind k : kinds)
        for (DataType t : types)
          for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod, ReduceOp::Avg}) {
            bool all_ops = t == DataType::F32 || t == DataType::BF16;
            if ((!is_reducing(k) && op != ReduceOp::Sum) || (!all_ops && (op == ReduceOp::Min || op == ReduceOp::Prod)))
              continue;
            for (size_t n : a.sizes) {
              size_t m = n;
              if (k == Kind::AllGather || k == Kind::AllToAll || k == Kind::AllToAllV) m = (n + world - 1) / world;
              int root = c % world;
              bool in_place = c % 3 == 1 && k != Kind::AllToAllV;
              std::string what = std::string(kind_name(k)) + " algo '" + a.name + "' " + peerlink::to_string(t) + " " +
                                 peerlink::to_string(op) + " count " + std::to_string(m) + " world " +
                                 std::to_string(world) + (in_place ? " in place" : "");
              hashes.put(rank, c, run_case(comm, mem, k, t, op, m, root, in_place, 9000 + c, what));
              ++c;
            }
          }
      gpu::stream_destroy(s);
    }
    MP_CHECK_MSG(c == cases, "ran " << c << " cases, expected " << cases);
  }, std::chrono::milliseconds(600000));
  EXPECT_EQ(fail, "");
  EXPECT_EQ(hashes.mismatch(cases), "");
}

// ll: pieces within the LL area (512 KB: 65531 x 8 B fits, 65537 x 8 B did not); ll128: LL128
// lines from one element to pieces of 2.4 MB (within the 4 MB default); push with 64 KB scratch
// positions (many steps per call, several blocks per step); auto with the default scratch (2
// ranks: 16 MB chunks; LL128 for pieces of 128 KB-4 MB; 3+ ranks: two-hop broadcast and reduce
// past LL128).
TEST(CollectivesGpu, Correctness) {
  REQUIRE_GPUS();
  correctness({{"ll", 0, {1, 3, 1001, 4099, 65531}},
               {"ll128", 0, {1, 3, 15, 61, 1001, 4099, 300001}},
               {"push", 65536, {1, 3, 1001, 65537, 300001}},
               {"", 0, {1, 7, 4099, 300001, 2000001}}},
              kAll, "gco");
}

// The two-hop broadcast and reduce (coll_plan.h), every root: with 64 KB scratch positions (shards
// of many chunks and blocks; counts below the rank count leave shards empty) and with the default
// scratch (shards of one or two chunks).
TEST(CollectivesGpu, TwoHopRooted) {
  REQUIRE_GPUS();
  correctness({{"two_hop", 65536, {1, 3, 1001, 65537, 300001}}, {"two_hop", 0, {4099, 2000001, 9000001}}},
              {Kind::Broadcast, Kind::Reduce}, "gth");
}

// One graph holding every kind (LL and push sizes), replayed with new inputs before every replay.
TEST(CollectivesGpu, GraphCaptureAndReplays) {
  REQUIRE_GPUS();
  const std::vector<int> devs = gpu_test_devices();
  const int world = int(devs.size());
  std::string uid = unique_test_id("gco-graph");
  std::string fail = run_ranks(world, [&](int rank) {
    gpu::set_device(devs[rank]);
    Communicator comm(uid, rank, world, devs[rank], opts(""));
    gpu::Stream s = gpu::stream_create();
    // 4 KB pieces (LL), 400 KB and 4 MB (LL128 where the pairs have it), 12 MB (push)
    for (size_t n : {size_t(1001), size_t(100003), size_t(1) << 20, size_t(3) << 20}) {
      const size_t b = n * 4;
      Mem mem = device_mem(comm, s);
      Buf in(mem, world * b, 0), ag(mem, world * b, 0), rs(mem, b, 0), bc(mem, b, 0), rd(mem, b, 0), a2a(mem, world * b, 0);
      auto run_all = [&] {
        peerlink::all_gather(comm, in.p, ag.p, n, DataType::I32, s);
        peerlink::reduce_scatter(comm, in.p, rs.p, n, DataType::I32, ReduceOp::Sum, s);
        peerlink::broadcast(comm, in.p, bc.p, n, DataType::I32, world - 1, s);
        peerlink::reduce(comm, in.p, rd.p, n, DataType::I32, ReduceOp::Max, 0, s);
        peerlink::all_to_all(comm, in.p, a2a.p, n, DataType::I32, s);
      };
      run_all();  // first use sets the collectives up (outside the capture)
      gpu::stream_sync(s);
      gpu::stream_begin_capture(s);
      run_all();
      gpu::GraphExec g = gpu::stream_end_capture(s);
      auto val = [](int rep, int r, size_t i) { return int32_t((rep * 131 + r * 17 + int(i)) % 100003 + 1); };
      std::vector<int32_t> h(world * n), out(world * n);
      for (int rep = 0; rep < 20; ++rep) {
        for (size_t i = 0; i < world * n; ++i) h[i] = val(rep, rank, i);
        gpu::memcpy_sync(in.p, h.data(), world * b);
        gpu::graph_launch(g, s);
        mem.sync();
        gpu::memcpy_sync(out.data(), ag.p, world * b);
        for (int r = 0; r < world; ++r)
          for (size_t i = 0; i < n; ++i) MP_CHECK_MSG(out[r * n + i] == val(rep, r, i), "replay " << rep << " all_gather");
        gpu::memcpy_sync(out.data(), rs.p, b);
        for (size_t i = 0; i < n; ++i) {
          int32_t want = 0;
          for (int r = 0; r < world; ++r) want += val(rep, r, rank * n + i);
          MP_CHECK_MSG(out[i] == want, "replay " << rep << " reduce_scatter element " << i);
        }
        gpu::memcpy_sync(out.data(), bc.p, b);
        for (size_t i = 0; i < n; ++i) MP_CHECK_MSG(out[i] == val(rep, world - 1, i), "replay " << rep << " broadcast");
        if (rank == 0) {
          gpu::memcpy_sync(out.data(), rd.p, b);
          for (size_t i = 0; i < n; ++i) {
            int32_t want = val(rep, 0, i);
            for (int r = 1; r < world; ++r) want = std::max(want, val(rep, r, i));
            MP_CHECK_MSG(out[i] == want, "replay " << rep << " reduce");
          }
        }
        gpu::memcpy_sync(out.data(), a2a.p, world * b);
        for (int r = 0; r < world; ++r)
          for (size_t i = 0; i < n; ++i)
            MP_CHECK_MSG(out[r * n + i] == val(rep, r, rank * n + i), "replay " << rep << " all_to_all");
      }
      gpu::graph_destroy(g);
    }
    gpu::stream_destroy(s);
  }, std::chrono::milliseconds(300000));
  EXPECT_EQ(fail, "");
}

// Small and quick: every kind on the LL, LL128 and push paths, and broadcast / reduce on the two-hop
// path (bf16 sums, one odd count, a root that is not rank 0), verified; what
// scripts/gpu_collectives.sh runs under compute-sanitizer racecheck.
TEST(CollectivesGpu, SanitizerSmall) {
  REQUIRE_GPUS();
  const std::vector<int> devs = gpu_test_devices();
  const int world = int(devs.size());
  std::string uid = unique_test_id("gco-san");
  std::string fail = run_ranks(world, [&](int rank) {
    gpu::set_device(devs[rank]);
    int c = 0, ai = 0;
    for (const char* algo : {"ll", "ll128", "push", "two_hop"}) {
      const bool two_hop = std::string(algo) == "two_hop";
      const bool push = two_hop || std::string(algo) == "push";  // 64 KB scratch positions, as in Correctness
      Communicator comm(uid + std::to_string(ai++), rank, world, devs[rank], opts(algo, push ? 65536 : 0));
      gpu::Stream s = gpu::stream_create();
      Mem mem = device_mem(comm, s);
      for (Kind k : kAll) {
        if (two_hop && k != Kind::Broadcast && k != Kind::Reduce) continue;
        const size_t m = 1001;
        const std::string what = std::string(kind_name(k)) + " algo '" + algo + "' count 1001";
        run_case(comm, mem, k, DataType::BF16, ReduceOp::Sum, m, world - 1, false, 7000 + c, what);
        ++c;
      }
      gpu::stream_destroy(s);
    }
  }, std::chrono::milliseconds(300000));
  EXPECT_EQ(fail, "");
}

// A captured all_gather + reduce_scatter replayed with eager calls of the same collectives on the
// communicator between the replays, on another stream, ordered by events only (no host wait in
// between): eager launches and replays share the device-side step counters and must stay in step.
// torch.compile(mode="reduce-overhead") produces this pattern: an eager reference call, then a replay.
TEST(CollectivesGpu, EagerCallsBetweenGraphReplays) {
  REQUIRE_GPUS();
  const std::vector<int> devs = gpu_test_devices();
  const int world = int(devs.size());
  std::string uid = unique_test_id("gco-mixed");
  std::string fail = run_ranks(world, [&](int rank) {
    gpu::set_device(devs[rank]);
    Communicator comm(uid, rank, world, devs[rank], opts(""));
    gpu::Stream cap = gpu::stream_create(), eager = gpu::stream_create();
    gpu::Event ev = gpu::event_create();
    constexpr int kReps = 6;
    const size_t n = 257, b = n * 4, wb = world * b;  // LL-line sizes
    auto val = [](int rep, int kind, int r, size_t i) { return int32_t((rep * 97 + kind * 31 + r * 13 + int(i)) % 1009 + 1); };
    Mem mem = device_mem(comm, cap);
    // Per repetition: inputs staged up front (graph: kind 0 and 1, eager: kind 2 and 3), outputs kept.
    std::vector<int32_t> h(kReps * world * n);
    auto staged = [&](int kind, size_t count) {
      auto buf = std::make_unique<Buf>(mem, kReps * count * 4, 0);
      for (int rep = 0; rep < kReps; ++rep)
        for (size_t i = 0; i < count; ++i) h[rep * count + i] = val(rep, kind, rank, i);
      mem.put(buf->p, h.data(), kReps * count * 4);
      return buf;
    };
    auto g_ag_in = staged(0, n), g_rs_in = staged(1, world * n), e_ag_in = staged(2, n), e_rs_in = staged(3, world * n);
    Buf g_ag(mem, wb, 0), g_rs(mem, b, 0), g_ag_src(mem, b, 0), g_rs_src(mem, wb, 0);
    Buf keep_ag(mem, kReps * wb, 0), keep_rs(mem, kReps * b, 0), e_ag(mem, kReps * wb, 0), e_rs(mem, kReps * b, 0);
    auto body = [&] {
      peerlink::all_gather(comm, g_ag_src.p, g_ag.p, n, DataType::I32, cap);
      peerlink::reduce_scatter(comm, g_rs_src.p, g_rs.p, n, DataType::I32, ReduceOp::Sum, cap);
    };
    body();  // first use sets the collectives up (outside the capture)
    mem.sync();
    gpu::stream_begin_capture(cap);
    body();
    gpu::GraphExec g = gpu::stream_end_capture(cap);
    for (int rep = 0; rep < kReps; ++rep) {
      gpu::event_record(ev, cap);
      gpu::stream_wait_event(eager, ev);
      peerlink::all_gather(comm, e_ag_in->at(rep * b), e_ag.at(rep * wb), n, DataType::I32, eager);
      peerlink::reduce_scatter(comm, e_rs_in->at(rep * wb), e_rs.at(rep * b), n, DataType::I32, ReduceOp::Sum, eager);
      gpu::event_record(ev, eager);
      gpu::stream_wait_event(cap, ev);
      gpu::memcpy_async(g_ag_src.p, g_ag_in->at(rep * b), b, cap);
      gpu::memcpy_async(g_rs_src.p, g_rs_in->at(rep * wb), wb, cap);
      gpu::graph_launch(g, cap);
      gpu::memcpy_async(keep_ag.at(rep * wb), g_ag.p, wb, cap);
      gpu::memcpy_async(keep_rs.at(rep * b), g_rs.p, b, cap);
    }
    mem.sync();
    gpu::stream_sync(eager);
    std::vector<int32_t> out(kReps * world * n);
    auto check = [&](const Buf& got, int kind, bool gathered, const char* what) {
      const size_t per = gathered ? world * n : n;
      mem.get(out.data(), got.p, kReps * per * 4);
      for (int rep = 0; rep < kReps; ++rep)
        for (size_t i = 0; i < per; ++i) {
          int32_t want = 0;
          if (gathered) want = val(rep, kind, int(i / n), i % n);
          else
            for (int r = 0; r < world; ++r) want += val(rep, kind, r, rank * n + i);
          MP_CHECK_MSG(out[rep * per + i] == want, what << " repetition " << rep << " element " << i << ": "
                                                        << out[rep * per + i] << ", expected " << want);
        }
    };
    check(keep_ag, 0, true, "replayed all_gather");
    check(keep_rs, 1, false, "replayed reduce_scatter");
    check(e_ag, 2, true, "eager all_gather");
    check(e_rs, 3, false, "eager reduce_scatter");
    gpu::graph_destroy(g);
    gpu::event_destroy(ev);
    gpu::stream_destroy(eager);
    gpu::stream_destroy(cap);
  }, std::chrono::milliseconds(300000));
  EXPECT_EQ(fail, "");
}

}  // namespace
