// Stream-ordered send/recv on GPUs under the performance knobs (Options::stream_ll_max, stream_ce_min,
// stream_ce_lanes, stream_acquire_load, stream_threads): sizes on both sides of each boundary, both forms, lone calls
// (a recv alone in its launch gets several blocks for a large LL message) and groups, mismatches,
// and graphs replayed with a changing payload. 2 ranks, device = rank; runs when PEERLINK_TEST_GPUS >= 2:
//   PEERLINK_TEST_GPUS=2 build/bin/peerlink_tests --gtest_filter='StreamGpuKnobs*'
// Payloads are verified on the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/gpu_gate.h"
#include "gpu/runtime.h"
#include "peerlink/peerlink.h"
#include "support/mp.h"

namespace {

using namespace pltest;
using namespace peerlink;
namespace gpu = peerlink::gpu;
using std::chrono::milliseconds;

struct Knobs {
  size_t ll_max = size_t(8) << 10;
  size_t ce_min = 0;
  int ce_lanes = 2;
  bool acq = false;
  int threads = 0;
};

Options opts(const Knobs& k, int timeout_ms = 30000) {
  Options o = Options::from_env();
  o.timeout = milliseconds(timeout_ms);
  o.stream_ll_max = k.ll_max;
  o.stream_ce_min = k.ce_min;
  o.stream_ce_lanes = k.ce_lanes;
  o.stream_acquire_load = k.acq;
  o.stream_threads = k.threads;
  return o;
}

struct Dev {
  char* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t bytes) : p(static_cast<char*>(gpu::device_malloc(bytes ? bytes : 1))), n(bytes) {
    gpu::memset_sync(p, 0, bytes ? bytes : 1);
  }
  ~Dev() { gpu::device_free(p); }
  void fill(size_t len, uint64_t tag) {
    std::vector<char> h(len);
    fill_pattern(h.data(), len, tag);
    gpu::memcpy_sync(p, h.data(), len);
  }
  void clear() { gpu::memset_sync(p, 0, n ? n : 1); }
  size_t check(size_t off, size_t len, uint64_t tag) const {
    std::vector<char> h(len);
    gpu::memcpy_sync(h.data(), p + off, len);
    return check_pattern(h.data(), len, tag);
  }
  bool zero() const {
    std::vector<char> h(n);
    gpu::memcpy_sync(h.data(), p, n);
    for (char c : h)
      if (c) return false;
    return true;
  }
};

void poll(Communicator& c) {
  c.group_start();
  c.group_end();
}

// Sizes around `b` (and the small ones), all <= cap.
std::vector<size_t> around(std::vector<size_t> bounds, size_t cap) {
  std::vector<size_t> v = {0, 8, 13, (size_t(8) << 10) + 8};
  for (size_t b : bounds)
    for (size_t x : {b - 8, b - 1, b, b + 1, b + 8})
      if (b >= 8 && x <= cap) v.push_back(x);
  return v;
}

// One configuration: for each size, both forms, (a) one group per direction pair {send, recv},
// (b) ping-pong with lone calls (rank 0 sends then receives; rank 1 receives then sends back),
// (c) three messages of different sizes per channel in one group. Every payload verified.
void exchange_all(const Knobs& kn, const std::vector<size_t>& sizes, const char* tag) {
  std::string uid = unique_test_id(tag);
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts(kn));
    const int peer = 1 - rank;
    size_t cap = 16;
    for (size_t s : sizes) cap = std::max(cap, 3 * s + 64);
    Dev src(cap), dst(cap), pub(cap);
    comm.notify_ipc_buffer(peer, 1, pub.p, cap, 1);
    comm.barrier();
    gpu::Stream s = gpu::stream_create();
    uint64_t k = 0;
    for (size_t len : sizes) {
      for (int form = 0; form < 2; ++form) {
        for (int pat = 0; pat < 3; ++pat, ++k) {
          const Dev& got = form == 0 ? dst : pub;
          const_cast<Dev&>(got).clear();
          const size_t lens[3] = {len, len / 2 + 3, len + 17};
          const int nmsg = pat == 2 ? 3 : 1;
          size_t offs[3] = {0, 0, 0};
          for (int m = 1; m < nmsg; ++m) offs[m] = offs[m - 1] + lens[m - 1] + 8;  // odd sizes, 8-aligned starts
          src.fill(offs[nmsg - 1] + lens[nmsg - 1], uint64_t(rank) * 100000 + k);
          comm.barrier();
          auto send = [&] {
            for (int m = 0; m < nmsg; ++m) {
              if (form == 0) comm.send(peer, src.p + offs[m], lens[m], s);
              else comm.send(peer, src.p + offs[m], lens[m], 1, offs[m], 1, s);
            }
          };
          auto recv = [&] {
            for (int m = 0; m < nmsg; ++m) {
              if (form == 0) comm.recv(peer, dst.p + offs[m], lens[m], s);
              else comm.recv(peer, 1, offs[m], lens[m], s);
            }
          };
          if (pat == 1) {  // ping-pong, lone calls (each its own launch)
            if (rank == 0) {
              send();
              recv();
            } else {
              recv();
              send();
            }
          } else {
            comm.group_start();
            recv();
            send();
            comm.group_end();
          }
          gpu::stream_sync(s);
          poll(comm);
          // Each byte of the sender's source at offs[m] lands at offs[m].
          std::vector<char> want(offs[nmsg - 1] + lens[nmsg - 1]);
          fill_pattern(want.data(), want.size(), uint64_t(peer) * 100000 + k);
          std::vector<char> h(want.size());
          gpu::memcpy_sync(h.data(), got.p, h.size());
          for (int m = 0; m < nmsg; ++m)
            MP_CHECK_MSG(std::memcmp(h.data() + offs[m], want.data() + offs[m], lens[m]) == 0,
                         tag << " form " << form << " pattern " << pat << " len " << lens[m] << " msg " << m);
          comm.barrier();
        }
      }
    }
    gpu::stream_destroy(s);
  }, milliseconds(240000));
  EXPECT_EQ(fail, "");
}

}  // namespace

// LL up to each swept ll_max (and off), sizes on both sides of the boundary and of the 8 KB piece.
TEST(StreamGpuKnobs, LLBoundaries) {
  REQUIRE_GPUS();
  for (size_t ll : {size_t(0), size_t(32) << 10, size_t(256) << 10}) {
    Knobs kn;
    kn.ll_max = ll;
    exchange_all(kn, around({size_t(8) << 10, size_t(32) << 10, size_t(256) << 10}, size_t(300) << 10),
                 ("sgk-ll" + std::to_string(ll)).c_str());
  }
}

// Fixed threads per block instead of the size rule: one warp (the published recv posts and spins
// from the same thread; 32 lines per thread in an 8 KB piece), a block that is not a power of two,
// and 512 for the small sizes the rule gives 128 or 256.
TEST(StreamGpuKnobs, ThreadsPerBlock) {
  REQUIRE_GPUS();
  for (int t : {32, 96, 512}) {
    Knobs kn;
    kn.ll_max = size_t(256) << 10;
    kn.acq = true;
    kn.threads = t;
    exchange_all(kn, around({size_t(1) << 10, size_t(2) << 10, size_t(8) << 10, size_t(64) << 10}, size_t(256) << 10),
                 ("sgk-thr" + std::to_string(t)).c_str());
  }
}

// The same with one ld.acquire.sys instead of fence.acq_rel.sys after every flag spin.
TEST(StreamGpuKnobs, AcquireLoad) {
  REQUIRE_GPUS();
  Knobs kn;
  kn.ll_max = size_t(128) << 10;
  kn.acq = true;
  exchange_all(kn, around({size_t(128) << 10, size_t(1) << 20}, size_t(2) << 20), "sgk-acq");
}

// Copy-engine sends (lanes 1 and 2) around ce_min, lone calls and groups (a group with a recv keeps
// the kernel path), multi-MB odd sizes split over lanes.
TEST(StreamGpuKnobs, CopyEngine) {
  REQUIRE_GPUS();
  for (int lanes : {1, 2}) {
    Knobs kn;
    kn.ce_min = size_t(1) << 20;
    kn.ce_lanes = lanes;
    exchange_all(kn, around({size_t(1) << 20, (size_t(3) << 20) + 5}, size_t(8) << 20),
                 ("sgk-ce" + std::to_string(lanes)).c_str());
  }
}

// Mismatches with multi-block LL recvs: the sender's message has more pieces than the recv expects,
// then fewer (blocks with no line of the sender's must not wait for one); each reported as
// InvalidArgument with nothing written, the channel going on; then 20 good messages reuse every ring
// slot (stale lines were all zeroed). Copy-engine mismatch: reported, the channel goes on.
TEST(StreamGpuKnobs, MismatchDrainsAllLines) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sgk-mm");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Knobs kn;
    kn.ll_max = size_t(64) << 10;
    kn.ce_min = size_t(1) << 20;
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts(kn, 5000));
    const size_t cap = size_t(4) << 20;
    Dev src(cap), pub(cap);
    comm.notify_ipc_buffer(1 - rank, 4, pub.p, cap, 1);
    comm.barrier();
    gpu::Stream s = gpu::stream_create();
    const size_t sent[2] = {size_t(40) << 10, 8}, want[2] = {size_t(20) << 10, size_t(60) << 10};
    for (int i = 0; i < 2; ++i) {
      if (rank == 0) {
        src.fill(sent[i], 50 + i);
        comm.send(1, src.p, sent[i], 4, 0, 1, s);
        gpu::stream_sync(s);
      } else {
        comm.recv(0, 4, 0, want[i], s);
        gpu::stream_sync(s);
        MP_CHECK_THROWS(poll(comm), InvalidArgument, "nothing was written");
        MP_CHECK_MSG(pub.zero(), "mismatch " << i);
      }
      comm.barrier();
    }
    for (int i = 0; i < 20; ++i) {
      const size_t len = (size_t(1) << (10 + i % 7)) + size_t(i);  // 1 KB .. 64 KB + i
      if (rank == 0) {
        src.fill(len, 100 + i);
        comm.send(1, src.p, len, 4, 0, 1, s);
        gpu::stream_sync(s);
      } else {
        comm.recv(0, 4, 0, len, s);
        gpu::stream_sync(s);
        poll(comm);
        MP_CHECK_MSG(pub.check(0, len, 100 + i) == SIZE_MAX, "message " << i << " len " << len);
      }
      comm.barrier();
    }
    // Copy engine: the recv expects offset 4096, the send names 0 (documented: the bytes may land).
    if (rank == 0) {
      src.fill(size_t(2) << 20, 300);
      comm.send(1, src.p, size_t(2) << 20, 4, 0, 1, s);
      gpu::stream_sync(s);  // the copy read src before it is refilled
      src.fill(size_t(2) << 20, 301);
      comm.send(1, src.p, size_t(2) << 20, 4, 0, 1, s);
      gpu::stream_sync(s);
      poll(comm);
    } else {
      comm.recv(0, 4, 4096, size_t(2) << 20, s);
      gpu::stream_sync(s);
      MP_CHECK_THROWS(poll(comm), InvalidArgument, "nothing was written");
      comm.recv(0, 4, 0, size_t(2) << 20, s);
      gpu::stream_sync(s);
      poll(comm);
      MP_CHECK(pub.check(0, size_t(2) << 20, 301) == SIZE_MAX);
    }
    comm.barrier();
    gpu::stream_destroy(s);
  }, milliseconds(120000));
  EXPECT_EQ(fail, "");
}

// Graphs: lone multi-block LL recv / send (ping-pong) and copy-engine sends captured once and replayed
// 300 times with a new payload each time; the device counters carry the sequence numbers.
TEST(StreamGpuKnobs, GraphReplayLLAndCopyEngine) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sgk-graph");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Knobs kn;
    kn.ll_max = size_t(128) << 10;
    kn.ce_min = size_t(2) << 20;
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts(kn));
    const int peer = 1 - rank;
    const size_t kLL = (size_t(100) << 10) + 5, kRaw = size_t(128) << 10, kCE = (size_t(3) << 20) + 9;
    const size_t cap = 4096 + kCE;  // the copy-engine message lands at offset 4096
    Dev a(kLL), b(kRaw), c(kCE), rb(kRaw), pub(cap);
    comm.notify_ipc_buffer(peer, 5, pub.p, cap, 1);
    comm.barrier();
    gpu::Stream s = gpu::stream_create();
    auto round = [&] {  // ping-pong of lone calls: LL published, LL NCCL form, copy-engine published
      for (int dir = 0; dir < 2; ++dir) {
        const bool sender = (rank == 0) == (dir == 0);
        if (sender) {
          comm.send(peer, a.p, kLL, 5, 0, 1, s);
          comm.send(peer, b.p, kRaw, s);
          comm.send(peer, c.p, kCE, 5, 4096, 1, s);
        } else {
          comm.recv(peer, 5, 0, kLL, s);
          comm.recv(peer, rb.p, kRaw, s);
          comm.recv(peer, 5, 4096, kCE, s);
        }
      }
    };
    round();  // eager: maps everything
    gpu::stream_sync(s);
    poll(comm);
    gpu::stream_begin_capture(s);
    round();
    gpu::GraphExec g = gpu::stream_end_capture(s);
    for (int rep = 0; rep < 300; ++rep) {
      a.fill(kLL, uint64_t(rep) * 8 + rank);
      b.fill(kRaw, uint64_t(rep) * 8 + 2 + rank);
      if (rep % 25 == 0) c.fill(kCE, uint64_t(rep) * 8 + 4 + rank);
      comm.barrier();  // the peer read its results before our sends overwrite them
      gpu::graph_launch(g, s);
      gpu::stream_sync(s);
      poll(comm);
      // pub [0, kLL) then [4096, +kCE): the copy-engine message (recv k + 2) lands after the LL one.
      const uint64_t ctag = uint64_t(rep / 25 * 25) * 8 + 4 + peer;
      MP_CHECK_MSG(rb.check(0, kRaw, uint64_t(rep) * 8 + 2 + peer) == SIZE_MAX, "raw, replay " << rep);
      MP_CHECK_MSG(pub.check(0, 4096, uint64_t(rep) * 8 + peer) == SIZE_MAX, "LL, replay " << rep);
      MP_CHECK_MSG(pub.check(4096, kCE, ctag) == SIZE_MAX, "copy engine, replay " << rep);
      comm.barrier();
    }
    poll(comm);
    gpu::graph_destroy(g);
    gpu::stream_destroy(s);
  }, milliseconds(240000));
  EXPECT_EQ(fail, "");
}

// Ranks that disagree on stream_ll_max (the area layout follows it) are refused at setup, naming it.
TEST(StreamGpuKnobs, LLMaxMustAgree) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sgk-agree");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Knobs kn;
    kn.ll_max = rank == 0 ? size_t(8) << 10 : size_t(32) << 10;
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts(kn, 5000));
    Dev src(64);
    gpu::Stream s = gpu::stream_create();
    MP_CHECK_THROWS(comm.send(1 - rank, src.p, 8, s), Error, "PEERLINK_STREAM_LL_MAX");
    comm.barrier();
    gpu::stream_destroy(s);
  }, milliseconds(60000));
  EXPECT_EQ(fail, "");
}
