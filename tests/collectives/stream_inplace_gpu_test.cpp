// NCCL-form send/recv in place on GPUs: each rank sends a buffer and receives the peer's message
// into the very same bytes, in one group (nccl-tests sendrecv / alltoall in place, torch's in-place
// exchanges). The recv's chunks wait for the send to have read them (stream_gate.h); the sizes
// cover LL pieces, half and whole staging slots and the zero-copy candidates (a gated recv is
// staged), eager and replayed from a graph with a new payload each time. Between processes and
// between two ranks of one process. Runs only when PEERLINK_TEST_GPUS >= 2:
//   PEERLINK_TEST_GPUS=2 build-cuda/bin/peerlink_tests --gtest_filter='StreamGpuInPlace*'
#include <chrono>
#include <string>

#include "stream_gpu_harness.h"

using namespace pltest;
using namespace pltest::stream_gpu;
using namespace peerlink;
namespace gpu = peerlink::gpu;
using std::chrono::milliseconds;

namespace {

const size_t kSizes[] = {8, 4099, size_t(16) << 10, (size_t(128) << 10) + 3, size_t(512) << 10, size_t(1) << 20,
                         (size_t(4) << 20) + 5, size_t(20) << 20, size_t(30) << 20};
constexpr size_t kCap = size_t(30) << 20;

// One rank's part: every size three times eagerly, then one size captured and replayed.
void exchange_in_place(Communicator& comm, int rank, const char* what) {
  const int peer = 1 - rank;
  Dev buf(kCap);
  gpu::Stream s = gpu::stream_create();
  uint64_t k = 0;
  auto round = [&] {
    comm.group_start();
    comm.send(peer, buf.p, buf.n, s);
    comm.recv(peer, buf.p, buf.n, s);
    comm.group_end();
  };
  for (size_t len : kSizes)
    for (int rep = 0; rep < 3; ++rep, ++k) {
      buf.n = len;
      buf.fill(uint64_t(rank) * 100000 + k);
      round();
      gpu::stream_sync(s);
      poll(comm);
      const size_t bad = buf.check(0, len, uint64_t(peer) * 100000 + k);
      MP_CHECK_MSG(bad == SIZE_MAX, what << ": len " << len << " rep " << rep << " byte " << bad);
      comm.barrier();  // the peer checked its buffer before our next round writes into it
    }
  for (size_t len : {(size_t(128) << 10) + 3, size_t(20) << 20}) {
    buf.n = len;
    gpu::stream_begin_capture(s);
    round();
    gpu::GraphExec g = gpu::stream_end_capture(s);
    for (int rep = 0; rep < 20; ++rep, ++k) {
      buf.fill(uint64_t(rank) * 100000 + k);
      gpu::graph_launch(g, s);
      gpu::stream_sync(s);
      const size_t bad = buf.check(0, len, uint64_t(peer) * 100000 + k);
      MP_CHECK_MSG(bad == SIZE_MAX, what << ": graph, len " << len << " replay " << rep << " byte " << bad);
      comm.barrier();
    }
    poll(comm);
    gpu::graph_destroy(g);
  }
  gpu::stream_destroy(s);
}

}  // namespace

TEST(StreamGpuInPlace, BetweenProcesses) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sg-inplace");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts());
    exchange_in_place(comm, rank, "between processes");
  }, milliseconds(240000));
  EXPECT_EQ(fail, "");
}

TEST(StreamGpuInPlace, OneProcess) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sg-inplace1");
  std::string fail = run_thread_ranks([&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts());
    exchange_in_place(comm, rank, "one process");
  });
  EXPECT_EQ(fail, "");
}
