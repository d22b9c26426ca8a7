// Windows that collectives make for unregistered buffers (Options::coll_graph_register;
// collectives/graph_windows.h) on the host backend, one process per rank. The host has no graphs,
// so these tests use mode 2 (every eager call registers as a captured one would): the ranks agree
// on reusing a window for the same buffer, register anew for a buffer in a new allocation, fall
// back to the staged paths when one rank's buffer cannot be exported, and mode 1 registers nothing
// outside a capture. Payloads are checked on every call. The GPU test with real graph capture and
// graph destruction is CollZcGpu.GraphRegistersPlainBuffers.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/coll_state.h"
#include "support/mp.h"
#include "window_host_harness.h"

namespace {

using namespace pltest;
using namespace pltest::coll;
using peerlink::Communicator;
using peerlink::DataType;
using peerlink::Options;

Options graph_opts(int mode) {
  Options o = wopts("", 1);  // auto; every piece large enough for the zero-copy path
  o.coll_graph_register = mode;
  return o;
}

size_t graph_windows(Communicator& comm) {
  auto st = peerlink::coll::coll_state_if_set(comm);
  return st ? st->graph_windows().wins.size() : 0;
}
uint64_t newest_graph_window(Communicator& comm) {
  auto st = peerlink::coll::coll_state_if_set(comm);
  return st && !st->graph_windows().wins.empty() ? st->graph_windows().wins.back()->w.id : 0;
}

int32_t val(int call, int rank, size_t i) { return int32_t((call * 7919 + rank * 104729 + int(i) * 31) % 1000003 + 1); }

// all_gather of n int32 per rank from src into dst; every rank's piece checked.
void gather_and_check(Communicator& comm, int32_t* src, int32_t* dst, size_t n, int call) {
  const int world = comm.world_size();
  for (size_t i = 0; i < n; ++i) src[i] = val(call, comm.rank(), i);
  peerlink::all_gather(comm, src, dst, n, DataType::I32);
  for (int r = 0; r < world; ++r)
    for (size_t i = 0; i < n; ++i)
      MP_CHECK_MSG(dst[r * n + i] == val(call, r, i), "call " << call << ": rank " << r << "'s element " << i);
}

TEST(GraphWindowHost, ReusedForTheSameBufferNewForANewAllocation3Ranks) {
  const int world = 3;
  const size_t n = 3001;
  std::string uid = unique_test_id("gwin-reuse");
  std::string fail = run_ranks(world, [&](int rank) {
    Communicator comm(uid, rank, world, peerlink::kHostDevice, graph_opts(2));
    auto* src = static_cast<int32_t*>(comm.alloc(n * 4));
    auto* dst = static_cast<int32_t*>(comm.alloc(world * n * 4));
    gather_and_check(comm, src, dst, n, 0);
    MP_CHECK_MSG(graph_windows(comm) == 1, graph_windows(comm) << " graph windows after the first call");
    const uint64_t first = newest_graph_window(comm);
    for (int call = 1; call <= 5; ++call) gather_and_check(comm, src, dst, n, call);
    MP_CHECK_MSG(graph_windows(comm) == 1 && newest_graph_window(comm) == first, "the window was not reused");
    // reduce_scatter pulls: its sendbuf gets the window.
    std::vector<int32_t> out(n);
    for (size_t i = 0; i < world * n; ++i) dst[i] = val(9, rank, i) % 1000;
    peerlink::reduce_scatter(comm, dst, out.data(), n, DataType::I32, peerlink::ReduceOp::Sum);
    for (size_t i = 0; i < n; ++i) {
      int32_t want = 0;
      for (int r = 0; r < world; ++r) want += val(9, r, rank * n + i) % 1000;
      MP_CHECK_MSG(out[i] == want, "reduce_scatter element " << i << ": " << out[i] << " != " << want);
    }
    MP_CHECK_MSG(graph_windows(comm) == 1, "reduce_scatter over the same buffer made a new window");
    // A buffer in a new allocation (even at the old address) is another buffer.
    comm.free(dst);
    dst = static_cast<int32_t*>(comm.alloc(world * n * 4));
    gather_and_check(comm, src, dst, n, 10);
    MP_CHECK_MSG(newest_graph_window(comm) > first, "no new window for a new allocation");
    gather_and_check(comm, src, dst, n, 11);
    MP_CHECK_MSG(graph_windows(comm) <= 2, graph_windows(comm) << " graph windows for two buffers");
    comm.free(dst);
    comm.free(src);
  }, ms(60000));
  EXPECT_EQ(fail, "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

// Rank 1's recvbuf is malloc'd (not exportable): every rank falls back, with the right data, and no
// window is kept anywhere; the next call with exportable buffers everywhere registers.
TEST(GraphWindowHost, OneRankCannotExportNoneUsesZeroCopy2Ranks) {
  const size_t n = 2049;
  std::string uid = unique_test_id("gwin-noexport");
  std::string fail = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, peerlink::kHostDevice, graph_opts(2));
    auto* src = static_cast<int32_t*>(comm.alloc(n * 4));
    std::vector<int32_t> heap(2 * n);
    auto* shared = static_cast<int32_t*>(comm.alloc(2 * n * 4));
    int32_t* dst = rank == 1 ? heap.data() : shared;
    for (int call = 0; call < 3; ++call) gather_and_check(comm, src, dst, n, call);
    MP_CHECK_MSG(graph_windows(comm) == 0, graph_windows(comm) << " graph windows kept without zero-copy");
    gather_and_check(comm, src, shared, n, 3);
    MP_CHECK_MSG(graph_windows(comm) == 1, "no window once both buffers are exportable");
    comm.free(shared);
    comm.free(src);
  }, ms(60000));
  EXPECT_EQ(fail, "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

// Mode 1 (the default) registers only inside a graph capture, which the host backend never is in;
// mode 0 never.
TEST(GraphWindowHost, DefaultModeRegistersNothingEagerly2Ranks) {
  for (int mode : {0, 1}) {
    const size_t n = 1000;
    std::string uid = unique_test_id("gwin-mode" + std::to_string(mode));
    std::string fail = run_ranks(2, [&](int rank) {
      Communicator comm(uid, rank, 2, peerlink::kHostDevice, graph_opts(mode));
      auto* src = static_cast<int32_t*>(comm.alloc(n * 4));
      auto* dst = static_cast<int32_t*>(comm.alloc(2 * n * 4));
      for (int call = 0; call < 3; ++call) gather_and_check(comm, src, dst, n, call);
      MP_CHECK_MSG(graph_windows(comm) == 0, "mode " << mode << ": " << graph_windows(comm) << " graph windows");
      comm.free(dst);
      comm.free(src);
    }, ms(60000));
    EXPECT_EQ(fail, "") << "mode " << mode;
  }
}

}  // namespace
