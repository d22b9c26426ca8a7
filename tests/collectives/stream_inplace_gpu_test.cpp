// NCCL-form send/recv in place on GPUs: each rank sends a buffer and receives the peer's message
// into the very same bytes, in one group (nccl-tests sendrecv / alltoall in place, torch's in-place
// exchanges). Staged recvs wait per chunk for the send to have read it; between ranks of one process
// the zero-copy candidates are exchanged in 32 KB units, each written once the reader opened its
// gate (stream_gate.h). The sizes cover LL pieces, half and whole staging slots and the zero-copy
// candidates (one run lowers the threshold to 1 MB: partial last units, lengths that are not whole
// vectors), eager and replayed from a graph with a new payload each time; also one side in place and
// the other not, and a ring of three. Between processes and between ranks of one process. Runs only
// when PEERLINK_TEST_GPUS >= 2:
//   PEERLINK_TEST_GPUS=2 build-cuda/bin/peerlink_tests --gtest_filter='StreamGpuInPlace*'
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "stream_gpu_harness.h"

using namespace pltest;
using namespace pltest::stream_gpu;
using namespace peerlink;
namespace gpu = peerlink::gpu;
using std::chrono::milliseconds;

namespace {

const size_t kSizes[] = {8, 4099, size_t(16) << 10, (size_t(128) << 10) + 3, size_t(512) << 10, size_t(1) << 20,
                         (size_t(4) << 20) + 5, (size_t(6) << 20) + 48, size_t(20) << 20, size_t(30) << 20};
const size_t kGraphSizes[] = {(size_t(128) << 10) + 3, size_t(20) << 20, size_t(30) << 20};
constexpr size_t kCap = size_t(30) << 20;

// How a rank takes part: ranks `ranks` in a ring (send to the next, receive from the previous);
// `apart`: this rank receives into another buffer than it sends (the peer still in place).
struct Role {
  int rank, ranks;
  bool apart = false;
};

// What the wrong bytes of a failed round hold, by 64 KB piece (the exchange's gates are per 32 KB): the
// sender's message of this round (expected), this rank's own bytes, or either one's previous round.
std::string describe_bad(const Dev& d, size_t len, int from, int me, uint64_t k) {
  std::vector<char> h(len);
  gpu::memcpy_sync(h.data(), d.p, len);
  const uint64_t want = uint64_t(from) * 100000 + k;
  const uint64_t tags[] = {uint64_t(me) * 100000 + k, want - 1, uint64_t(me) * 100000 + k - 1};
  const char* names[] = {"own", "sender's previous", "own previous"};
  size_t units = 0, bytes = 0;
  std::string first;
  for (size_t u = 0; u * 65536 < len; ++u) {
    size_t ub = 0, at = SIZE_MAX;
    for (size_t i = u * 65536; i < std::min(len, (u + 1) * 65536); ++i)
      if (static_cast<unsigned char>(h[i]) != pattern_byte(want, i)) {
        ++ub;
        if (at == SIZE_MAX) at = i;
      }
    if (!ub) continue;
    bytes += ub;
    if (units++ >= 6) continue;
    std::string kind = "other";
    for (int t = 0; t < 3; ++t)
      if (static_cast<unsigned char>(h[at]) == pattern_byte(tags[t], at) &&
          static_cast<unsigned char>(h[at + 1 < len ? at + 1 : at]) == pattern_byte(tags[t], at + 1 < len ? at + 1 : at))
        kind = names[t];
    first += " unit " + std::to_string(u) + ": " + std::to_string(ub) + " B from +" + std::to_string(at - u * 65536) +
             " " + kind + ";";
  }
  return std::to_string(bytes) + " bytes wrong in " + std::to_string(units) + " units:" + first;
}

// One rank's part: every size three times eagerly, then some sizes captured and replayed.
void exchange_in_place(Communicator& comm, const Role& me, const char* what) {
  const int next = (me.rank + 1) % me.ranks, prev = (me.rank + me.ranks - 1) % me.ranks;
  Dev buf(kCap), other(me.apart ? kCap : 0);
  Dev& in = me.apart ? other : buf;
  gpu::Stream s = gpu::stream_create();
  uint64_t k = 0;
  auto round = [&] {
    comm.group_start();
    comm.send(next, buf.p, buf.n, s);
    comm.recv(prev, in.p, buf.n, s);
    comm.group_end();
  };
  auto check = [&](size_t len, const char* how, int rep) {
    const size_t bad = in.check(0, len, uint64_t(prev) * 100000 + k);
    MP_CHECK_MSG(bad == SIZE_MAX, what << ": " << how << ", len " << len << " rep " << rep << " byte " << bad << " ("
                                       << describe_bad(in, len, prev, me.rank, k) << ")");
  };
  for (size_t len : kSizes)
    for (int rep = 0; rep < 3; ++rep, ++k) {
      buf.n = len;
      buf.fill(uint64_t(me.rank) * 100000 + k);
      round();
      gpu::stream_sync(s);
      poll(comm);
      check(len, "eager", rep);
      comm.barrier();  // the peer checked its buffer before our next round writes into it
    }
  for (size_t len : kGraphSizes) {
    buf.n = len;
    gpu::stream_begin_capture(s);
    round();
    gpu::GraphExec g = gpu::stream_end_capture(s);
    for (int rep = 0; rep < 20; ++rep, ++k) {
      buf.fill(uint64_t(me.rank) * 100000 + k);
      gpu::graph_launch(g, s);
      gpu::stream_sync(s);
      check(len, "graph", rep);
      comm.barrier();
    }
    poll(comm);
    gpu::graph_destroy(g);
  }
  gpu::stream_destroy(s);
}

// Ranks as threads of one process (devices 0, 1, 0, ...), each running exchange_in_place; zero-copy
// from `direct_min` bytes (0: the default); with `apart`, rank 1 receives out of place.
std::string in_one_process(const char* id, int ranks, size_t direct_min, bool apart, const char* what) {
  const std::string uid = unique_test_id(id);
  Options o = opts();
  if (direct_min) o.stream_direct_min = direct_min;
  return run_thread_ranks(
      [&](int rank) {
        const int dev = pltest::gpu_test_device(rank % 2);
        gpu::set_device(dev);
        Communicator comm(uid, rank, ranks, dev, o);
        Role me{rank, ranks};
        me.apart = apart && rank == 1;
        exchange_in_place(comm, me, what);
      },
      milliseconds(ranks > 2 ? 400000 : 240000), ranks);
}

constexpr size_t kOneMB = size_t(1) << 20;

}  // namespace

TEST(StreamGpuInPlace, BetweenProcesses) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sg-inplace");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts());
    exchange_in_place(comm, Role{rank, 2}, "between processes");
  }, milliseconds(240000));
  EXPECT_EQ(fail, "");
}

TEST(StreamGpuInPlace, OneProcess) {
  REQUIRE_GPUS();
  EXPECT_EQ(in_one_process("sg-inplace1", 2, 0, false, "one process"), "");
}

// Zero-copy from 1 MB: most sizes go the gated exchange (those that are not whole 16-byte vectors stay staged).
TEST(StreamGpuInPlace, OneProcessZeroCopyFromOneMegabyte) {
  REQUIRE_GPUS();
  EXPECT_EQ(in_one_process("sg-inplace-zc", 2, kOneMB, false, "zero-copy from 1 MB"), "");
}

// Rank 1 receives out of place: rank 0's send opens gates without waiting for any, rank 1's waits
// for rank 0's gates while reading a buffer nobody writes.
TEST(StreamGpuInPlace, OneProcessOneSideApart) {
  REQUIRE_GPUS();
  EXPECT_EQ(in_one_process("sg-inplace-apart", 2, kOneMB, true, "one side apart"), "");
}

// A ring of three ranks (devices 0, 1, 0): each send's gates go to the rank it receives from, not
// to the rank it sends to.
TEST(StreamGpuInPlace, OneProcessRingOfThree) {
  REQUIRE_GPUS();
  EXPECT_EQ(in_one_process("sg-inplace-ring", 3, kOneMB, false, "ring of three"), "");
}
