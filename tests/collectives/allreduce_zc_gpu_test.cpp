// The zero-copy allreduce on GPUs (zc_allreduce.cpp): sendbuf and recvbuf in one registered window
// of device memory, forced (PEERLINK_ALLREDUCE_ALGO=zero_copy) and by auto (with 4 NVLink ranks the
// ~32 MB case takes it; otherwise auto never does, and the case checks the other paths on windows), bf16 / f16 / f32 / i64 x sum / max / prod x counts 1, 7, 4097 and ~32 MB, in place
// and not, 16-byte aligned and 8 bytes off (the unaligned kernel path), against the float64
// reference, bitwise equal across ranks, guard bytes after recvbuf; and plain buffers captured into
// a graph (graph windows, Options::coll_graph_register; by auto where auto takes it, else forced with
// windows made by eager calls too), replayed 20 times with new inputs, in place and not. Runs only when PEERLINK_TEST_GPUS >= 2; rank r uses device PEERLINK_TEST_DEVICES[r].
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "allreduce_harness.h"
#include "collectives/coll_state.h"
#include "collectives/gpu_gate.h"
#include "device_window.h"
#include "gpu/runtime.h"
#include "peerlink/peerlink.h"
#include "support/mp.h"

namespace {

using namespace pltest;
using namespace pltest::coll;
using peerlink::Communicator;
using peerlink::Options;
namespace gpu = peerlink::gpu;

const DataType kTypes[] = {DataType::BF16, DataType::F16, DataType::F32, DataType::I64};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Prod, ReduceOp::Avg};
const size_t kBig = (size_t(32) << 20) + 48;  // bytes of the large case (an odd count in 2-byte types)
const size_t kCounts[] = {1, 7, 4097, 0};     // 0: the large case
constexpr size_t kGuard = 64;

void every_case(const char* tag, const char* algo) {
  const std::vector<int> devs = gpu_test_devices();
  const int world = int(devs.size());
  const int cases = int(std::size(kTypes) * std::size(kCounts) * 2);
  HashTable hashes(world, cases);
  std::string uid = unique_test_id(tag);
  std::string fail = run_ranks(world, [&](int rank) {
    gpu::set_device(devs[rank]);
    Communicator comm(uid, rank, world, devs[rank], allreduce_opts(algo, 60000));
    gpu::Stream s = gpu::stream_create();
    DeviceWindow w(comm, rank % 2 == 0, 2 * (kBig + 4096));
    int c = 0;
    for (DataType t : kTypes)
      for (size_t cnt : kCounts)
        for (bool in_place : {false, true}) {
          const ReduceOp op = kOps[c % 3];
          const size_t es = peerlink::dtype_size(t), n = cnt ? cnt : kBig / es, bytes = n * es;
          const size_t shift = c % 4 == 3 ? 8 : 0;  // every fourth case: 8 bytes off 16-byte alignment
          char* src = w.base + shift;
          char* dst = in_place ? src : w.base + kBig + 4096 + shift;
          const std::string what = std::string("zero-copy allreduce (") + (*algo ? algo : "auto") + ") " +
                                   peerlink::to_string(t) + " " + peerlink::to_string(op) + " count " + std::to_string(n) +
                                   " world " + std::to_string(world) + (in_place ? " in place" : "") +
                                   (shift ? " unaligned" : "");
          std::vector<unsigned char> h(bytes + kGuard);
          fill_input(h.data(), n, 5200 + c, rank, t, op);
          gpu::memcpy_sync(src, h.data(), bytes);
          std::vector<unsigned char> guard(kGuard, 0x5A);
          gpu::memcpy_sync(dst + bytes, guard.data(), kGuard);
          if (!in_place) gpu::memset_sync(dst, 0xEE, bytes);
          comm.barrier();  // no peer is still reading the previous case's sendbuf
          peerlink::allreduce(comm, src, dst, n, t, op, s);
          gpu::stream_sync(s);
          peerlink::allreduce_check(comm);
          comm.barrier();  // every peer's stores into this rank's recvbuf landed
          gpu::memcpy_sync(h.data(), dst, bytes + kGuard);
          check_result(h.data(), n, 5200 + c, world, t, op, what);
          for (size_t i = 0; i < kGuard; ++i)
            MP_CHECK_MSG(h[bytes + i] == 0x5A, what << ": guard byte " << i << " after recvbuf written");
          hashes.put(rank, c, fnv1a(h.data(), bytes) | 1);
          ++c;
        }
    gpu::stream_destroy(s);
  }, std::chrono::milliseconds(300000));
  EXPECT_EQ(fail, "");
  EXPECT_EQ(hashes.mismatch(cases), "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

TEST(AllreduceZcGpu, ForcedEveryTypeAndSize) {
  REQUIRE_GPUS();
  every_case("garzc-forced", "zero_copy");
}
TEST(AllreduceZcGpu, AutoEveryTypeAndSize) {
  REQUIRE_GPUS();
  every_case("garzc-auto", "");
}

// Plain device buffers (no window): captured into a graph, the zero-copy allreduce gives both buffers
// graph windows (two, or one in place); each graph is replayed 20 times with a new input before each
// replay. int32 sums, checked element by element. 4 ranks over NVLink: auto (the eager call before
// the capture is staged); otherwise forced, and coll_graph_register 2 (the eager call makes the
// windows).
TEST(AllreduceZcGpu, GraphWindowsReplay) {
  REQUIRE_GPUS();
  const std::vector<int> devs = gpu_test_devices();
  const int world = int(devs.size());
  std::string uid = unique_test_id("garzc-graph");
  std::string fail = run_ranks(world, [&](int rank) {
    gpu::set_device(devs[rank]);
    // Where auto takes the zero-copy allreduce at 32 MB (allreduce.cpp): 4 ranks, every pair NVLink.
    const bool by_auto = world == 4 && [&] {
      Communicator probe(uid + "-probe", rank, world, devs[rank], allreduce_opts("", 60000));
      return peerlink::coll::coll_state(probe).nvlink_all();
    }();
    Options o = allreduce_opts(by_auto ? "" : "zero_copy", 60000);
    if (!by_auto) o.coll_graph_register = 2;
    Communicator comm(uid, rank, world, devs[rank], o);
    gpu::Stream s = gpu::stream_create();
    const size_t n = (size_t(32) << 20) / 4 + 12, b = n * 4;  // just above 32 MB of int32
    char* in = static_cast<char*>(peerlink::device::alloc(b));
    char* out = static_cast<char*>(peerlink::device::alloc(b));
    auto val = [](int rep, int r, size_t i) { return int32_t((uint32_t(rep) * 2654435761u + uint32_t(r) * 40503u + uint32_t(i)) % 1000003u); };
    std::vector<int32_t> h(n);
    auto windows = [&] { return peerlink::coll::coll_state(comm).graph_windows().wins.size(); };
    for (bool in_place : {false, true}) {
      char* dst = in_place ? in : out;
      auto fill = [&](int rep) {
        for (size_t i = 0; i < n; ++i) h[i] = val(rep, rank, i);
        gpu::memcpy_sync(in, h.data(), b);
      };
      auto check = [&](int rep) {
        gpu::stream_sync(s);
        peerlink::allreduce_check(comm);
        comm.barrier();
        gpu::memcpy_sync(h.data(), dst, b);
        for (size_t i = 0; i < n; ++i) {
          int32_t want = 0;
          for (int r = 0; r < world; ++r) want += val(rep, r, i);
          MP_CHECK_MSG(h[i] == want, (in_place ? "in place " : "") << "replay " << rep << ": element " << i << " is "
                                                                    << h[i] << ", want " << want);
        }
      };
      fill(0);
      peerlink::allreduce(comm, in, dst, n, DataType::I32, ReduceOp::Sum, s);  // eager
      check(0);
      gpu::stream_begin_capture(s);
      peerlink::allreduce(comm, in, dst, n, DataType::I32, ReduceOp::Sum, s);
      gpu::GraphExec g = gpu::stream_end_capture(s);
      MP_CHECK_MSG(windows() >= (in_place ? 1u : 2u), windows() << " graph windows after capturing a " << b
                                                                 << "-byte allreduce: the zero-copy path did not run");
      for (int rep = 1; rep <= 20; ++rep) {
        comm.barrier();  // every peer checked the previous replay before this rank's input changes
        fill(rep);
        gpu::graph_launch(g, s);
        check(rep);
      }
      gpu::graph_destroy(g);
    }
    peerlink::device::free(in);
    peerlink::device::free(out);
    gpu::stream_destroy(s);
  }, std::chrono::milliseconds(300000));
  EXPECT_EQ(fail, "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

}  // namespace
