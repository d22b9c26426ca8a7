// Stream-ordered NCCL-form send/recv between two ranks of ONE process (two threads, as nccl-tests
// -g 2 / -t 2 and single-process multi-GPU programs run): messages of at least
// Options::stream_direct_min bytes go zero-copy (stream_direct_device.h), smaller ones and recv
// buffers the peer's GPU cannot write (VMM) are staged, all on the same pair and in the same groups;
// sends to the rank itself in those groups are copied by the group's kernel.
// Runs only when PEERLINK_TEST_GPUS >= 2 (one forked child holds both ranks):
//   PEERLINK_TEST_GPUS=2 build-cuda/bin/peerlink_tests --gtest_filter='StreamGpuDirect*'
// Payloads are verified on the host after every exchange or replay.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "gpu/vmm.h"
#include "stream_gpu_harness.h"

using namespace pltest;
using namespace pltest::stream_gpu;
using namespace peerlink;
namespace gpu = peerlink::gpu;
using std::chrono::milliseconds;

namespace {

// A device buffer of VMM memory (only its own device has access): the peer GPU cannot write it.
struct VmmBuf {
  char* p = nullptr;
  size_t n = 0;
  VmmBuf(int dev, size_t bytes) {
    const size_t chunk = gpu::vmm_granularity(dev);
    const int chunks = int((bytes + chunk - 1) / chunk);
    n = size_t(chunks) * chunk;
    p = static_cast<char*>(gpu::vmm_test_alloc(dev, chunk, chunks, false));
  }
  ~VmmBuf() { gpu::vmm_test_free(p, n); }
  size_t check(size_t len, uint64_t tag) const {
    std::vector<char> h(len);
    gpu::memcpy_sync(h.data(), p, len);
    return check_pattern(h.data(), len, tag);
  }
};

Options direct_opts(size_t direct_min) {
  Options o = opts();
  o.stream_direct_min = direct_min;
  o.stream_ll_max = size_t(256) << 10;  // the sizes below are chosen around this LL bound
  return o;
}

}  // namespace

// Sizes around the threshold and up to 256 MB, one exchange (send + recv in one group) each, then
// a group of several messages per direction mixing LL, staged and zero-copy ones, repeated past
// the post ring's length (kDirectRing = 64 zero-copy messages) three times.
TEST(StreamGpuDirect, InProcessSizesAndMixedGroups) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sgd-mix");
  std::string fail = run_thread_ranks([&](int rank) {
    const int dev = pltest::gpu_test_device(rank);
    gpu::set_device(dev);
    Communicator comm(uid, rank, 2, dev, direct_opts(size_t(1) << 20));
    const int peer = 1 - rank;
    const size_t cap = size_t(256) << 20;
    Dev src(cap), dst(cap);
    gpu::Stream s = gpu::stream_create();
    const size_t sizes[] = {(size_t(1) << 20) - 8, size_t(1) << 20, (size_t(1) << 20) + 3, (size_t(3) << 20) + 5,
                            size_t(64) << 20, cap - 7};
    uint64_t k = 0;
    for (size_t len : sizes) {
      src.n = len;
      src.fill(uint64_t(rank) * 1000 + ++k);
      comm.group_start();
      comm.send(peer, src.p, len, s);
      comm.recv(peer, dst.p, len, s);
      comm.group_end();
      gpu::stream_sync(s);
      poll(comm);
      const size_t bad = dst.check(0, len, uint64_t(peer) * 1000 + k);
      MP_CHECK_MSG(bad == SIZE_MAX, "len " << len << " byte " << bad);
      comm.barrier();
    }
    // Several messages per direction in one group: LL (8 B, 200 KB), staged (600 KB), zero-copy
    // (1 MB, 2 MB + 9, 5 MB), each at its own offset of one buffer; 70 rounds = 210 zero-copy
    // messages per direction. Plus two sends to this rank itself (copied by the group's kernel).
    const size_t lens[] = {8, (size_t(2) << 20) + 9, size_t(200) << 10, size_t(1) << 20, size_t(600) << 10,
                           size_t(5) << 20};
    std::vector<size_t> offs;
    size_t total = 0;
    for (size_t len : lens) {
      offs.push_back(total);
      total += (len + 4095) / 4096 * 4096 + 64;
    }
    for (int round = 0; round < 70; ++round) {
      ++k;
      std::vector<char> h(total);
      for (size_t i = 0; i < offs.size(); ++i) fill_pattern(h.data() + offs[i], lens[i], uint64_t(rank) * 1000 + k * 8 + i);
      gpu::memcpy_sync(src.p, h.data(), total);
      const size_t self_at = size_t(64) << 20, self_len = (size_t(3) << 20) + 1 + size_t(round) * 4097;
      comm.group_start();
      comm.send(rank, src.p + offs[1], lens[1], s);  // to itself: lands at self_at
      for (size_t i = 0; i < offs.size(); ++i) comm.send(peer, src.p + offs[i], lens[i], s);
      comm.recv(rank, dst.p + self_at, lens[1], s);
      for (size_t i = 0; i < offs.size(); ++i) comm.recv(peer, dst.p + offs[i], lens[i], s);
      comm.send(rank, src.p, self_len, s);
      comm.recv(rank, dst.p + 2 * self_at, self_len, s);
      comm.group_end();
      gpu::stream_sync(s);
      poll(comm);
      for (size_t i = 0; i < offs.size(); ++i) {
        const size_t bad = dst.check(offs[i], lens[i], uint64_t(peer) * 1000 + k * 8 + i);
        MP_CHECK_MSG(bad == SIZE_MAX, "round " << round << " message " << i << " (" << lens[i] << " B) byte " << bad);
      }
      MP_CHECK_MSG(dst.check(self_at, lens[1], uint64_t(rank) * 1000 + k * 8 + 1) == SIZE_MAX,
                   "round " << round << " self copy 1");
      std::vector<char> whole(self_len), mine(self_len);
      gpu::memcpy_sync(whole.data(), dst.p + 2 * self_at, self_len);
      gpu::memcpy_sync(mine.data(), src.p, self_len);
      MP_CHECK_MSG(whole == mine, "round " << round << " self copy 2 (" << self_len << " B)");
      comm.barrier();
    }
    gpu::stream_destroy(s);
  });
  EXPECT_EQ(fail, "");
}

// A recv into VMM memory (no access for the peer's GPU) is staged, between zero-copy messages of
// the same size on the same pair; the same with zero-copy turned off (stream_direct_min 0).
TEST(StreamGpuDirect, UnreachableBufferIsStagedAndDirectOff) {
  REQUIRE_GPUS();
  for (size_t direct_min : {size_t(1) << 20, size_t(0)}) {
    std::string uid = unique_test_id("sgd-vmm");
    std::string fail = run_thread_ranks([&](int rank) {
      const int dev = pltest::gpu_test_device(rank);
      gpu::set_device(dev);
      Communicator comm(uid, rank, 2, dev, direct_opts(direct_min));
      const int peer = 1 - rank;
      const size_t len = (size_t(8) << 20) + 13;
      Dev src(len), dst(len);
      VmmBuf vdst(dev, len);
      gpu::Stream s = gpu::stream_create();
      for (int i = 0; i < 12; ++i) {
        const uint64_t tag = uint64_t(rank) * 100 + i;
        src.fill(tag);
        const bool into_vmm = i % 3 == 1;
        comm.group_start();
        comm.send(peer, src.p, len, s);
        comm.recv(peer, into_vmm ? vdst.p : dst.p, len, s);
        comm.group_end();
        gpu::stream_sync(s);
        poll(comm);
        const uint64_t want = uint64_t(peer) * 100 + i;
        const size_t bad = into_vmm ? vdst.check(len, want) : dst.check(0, len, want);
        MP_CHECK_MSG(bad == SIZE_MAX, "direct_min " << direct_min << " exchange " << i << (into_vmm ? " (vmm)" : "")
                                                    << " byte " << bad);
        comm.barrier();
      }
      gpu::stream_destroy(s);
    });
    EXPECT_EQ(fail, "") << "direct_min " << direct_min;
  }
}

// The exchange captured once (after an eager warm-up) and replayed 300 times with a changing
// payload: the zero-copy message numbers live on the device, so every replay is a new message.
TEST(StreamGpuDirect, GraphReplays) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sgd-graph");
  std::string fail = run_thread_ranks([&](int rank) {
    const int dev = pltest::gpu_test_device(rank);
    gpu::set_device(dev);
    Communicator comm(uid, rank, 2, dev, direct_opts(size_t(1) << 20));
    const int peer = 1 - rank;
    const size_t big = (size_t(4) << 20) + 5, small = 4096;
    Dev a(big), b(small), ra(big), rb(small);
    gpu::Stream s = gpu::stream_create();
    auto exchange = [&] {
      comm.group_start();
      comm.send(peer, a.p, big, s);
      comm.send(peer, b.p, small, s);
      comm.recv(peer, ra.p, big, s);
      comm.recv(peer, rb.p, small, s);
      comm.group_end();
    };
    exchange();  // eager first: maps the peer's area outside the capture
    gpu::stream_sync(s);
    poll(comm);
    comm.barrier();
    gpu::stream_begin_capture(s);
    exchange();
    gpu::GraphExec g = gpu::stream_end_capture(s);
    for (int rep = 0; rep < 300; ++rep) {
      const uint64_t tag = uint64_t(rep) * 4 + rank;
      a.fill(tag);
      b.fill(tag + 2);
      gpu::graph_launch(g, s);
      gpu::stream_sync(s);
      const uint64_t want = uint64_t(rep) * 4 + peer;
      MP_CHECK_MSG(ra.check(0, big, want) == SIZE_MAX, "replay " << rep << " (zero-copy message)");
      MP_CHECK_MSG(rb.check(0, small, want + 2) == SIZE_MAX, "replay " << rep << " (LL message)");
      comm.barrier();  // the peer read its result before our next replay overwrites it
    }
    poll(comm);
    gpu::graph_destroy(g);
    gpu::stream_destroy(s);
  });
  EXPECT_EQ(fail, "");
}

// Small enough for compute-sanitizer racecheck (scripts/gpu_check.sh): zero-copy (512 KB), staged
// into VMM (512 KB) and LL (8 KB) messages plus a self copy, both directions, in one group.
TEST(StreamGpuDirect, SanitizerSmall) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sgd-san");
  std::string fail = run_thread_ranks([&](int rank) {
    const int dev = pltest::gpu_test_device(rank);
    gpu::set_device(dev);
    Communicator comm(uid, rank, 2, dev, direct_opts(size_t(256) << 10));
    const int peer = 1 - rank;
    const size_t big = size_t(512) << 10, small = 8192;
    Dev src(2 * big), dst(2 * big), self(big);
    VmmBuf vdst(dev, big);
    gpu::Stream s = gpu::stream_create();
    for (int round = 0; round < 2; ++round) {
      const uint64_t tag = uint64_t(rank) * 10 + round;
      src.fill(tag);
      comm.group_start();
      comm.send(peer, src.p, big, s);
      comm.send(peer, src.p + big, big, s);
      comm.send(peer, src.p, small, s);
      comm.send(rank, src.p, big, s);
      comm.recv(peer, dst.p, big, s);
      comm.recv(peer, vdst.p, big, s);
      comm.recv(peer, dst.p + big, small, s);
      comm.recv(rank, self.p, big, s);
      comm.group_end();
      gpu::stream_sync(s);
      poll(comm);
      std::vector<char> want(2 * big), got(big);
      fill_pattern(want.data(), 2 * big, uint64_t(peer) * 10 + round);
      gpu::memcpy_sync(got.data(), dst.p, big);
      MP_CHECK_MSG(std::equal(got.begin(), got.end(), want.begin()), "round " << round << " zero-copy");
      gpu::memcpy_sync(got.data(), vdst.p, big);
      MP_CHECK_MSG(std::equal(got.begin(), got.end(), want.begin() + long(big)), "round " << round << " staged");
      gpu::memcpy_sync(got.data(), dst.p + big, small);
      MP_CHECK_MSG(std::equal(got.begin(), got.begin() + long(small), want.begin()), "round " << round << " LL");
      fill_pattern(want.data(), 2 * big, tag);
      gpu::memcpy_sync(got.data(), self.p, big);
      MP_CHECK_MSG(std::equal(got.begin(), got.end(), want.begin()), "round " << round << " self");
      comm.barrier();
    }
    gpu::stream_destroy(s);
  });
  EXPECT_EQ(fail, "");
}
