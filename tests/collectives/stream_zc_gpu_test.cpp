// Stream-ordered NCCL-form send/recv between two PROCESSES, zero-copy (src/stream/stream_zc.h):
// the receiver exports its receive allocations, the sender maps them and writes straight into them
// once it acknowledged them; until then (the first messages into a buffer, buffers first used in a
// capture, memory that cannot be exported) messages are staged. Every payload is verified, and the
// tests check that the zero-copy path really ran (the receiver's kernels saw acknowledged slots).
// Runs only when PEERLINK_TEST_GPUS >= 2:
//   PEERLINK_TEST_GPUS=2 build-cuda/bin/peerlink_tests --gtest_filter='StreamGpuZeroCopy*'
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "gpu/vmm.h"
#include "stream/stream_layout.h"
#include "stream/stream_p2p.h"
#include "stream_gpu_harness.h"
#include "transport/services.h"

using namespace pltest;
using namespace pltest::stream_gpu;
using namespace peerlink;
namespace gpu = peerlink::gpu;
using std::chrono::milliseconds;

namespace {

int slots_seen(Communicator& comm, int peer) {
  return detail::stream_engine(detail::services(comm)).zero_copy_slots_seen(peer);
}

// rank 0 sends `len` bytes tagged `tag` into rank 1's dst; both verify nothing else.
void one_way(Communicator& comm, int rank, const Dev& src, char* dst, size_t len, gpu::Stream s) {
  if (rank == 0) comm.send(1, src.p, len, s);
  else comm.recv(0, dst, len, s);
  gpu::stream_sync(s);
  poll(comm);
}

}  // namespace

// Sizes from below the zero-copy threshold (Options::stream_direct_ipc_min, 16 MB) to 256 MB, at
// several offsets of two allocations, rounds
// repeated until the sender has mapped them; then one allocation freed and a new one received
// into (a new slot: nothing may land in the old mapping); then both directions in one group.
TEST(StreamGpuZeroCopy, BetweenProcessesSizesReallocAndExchange) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sgz-ipc");
  std::string fail = run_ranks(2, [&](int rank) {
    const int dev = pltest::gpu_test_device(rank);
    gpu::set_device(dev);
    Communicator comm(uid, rank, 2, dev, opts());
    const int peer = 1 - rank;
    const size_t cap = size_t(256) << 20;
    const size_t sizes[] = {size_t(256) << 10, (size_t(1) << 20) + 3, size_t(64) << 20, cap - 4096 - 7};
    Dev src(cap), a(cap);
    auto b = std::make_unique<Dev>(size_t(32) << 20);
    gpu::Stream s = gpu::stream_create();
    uint64_t k = 0;
    for (int round = 0; round < 4; ++round)
      for (size_t len : sizes) {
        ++k;
        src.n = len;
        if (rank == 0) src.fill(k);
        const size_t off = round % 2 ? 4096 : 0;
        one_way(comm, rank, src, a.p + off, len, s);
        if (rank == 1) MP_CHECK_MSG(a.check(off, len, k) == SIZE_MAX, "round " << round << " len " << len);
        if (rank == 0) src.fill(k + 1000);
        const size_t blen = std::min(len, b->n - 5);
        one_way(comm, rank, src, b->p + 5, blen, s);
        if (rank == 1) MP_CHECK_MSG(b->check(5, blen, k + 1000) == SIZE_MAX, "round " << round << " into b");
        comm.barrier();
      }
    if (rank == 1) MP_CHECK_MSG(slots_seen(comm, 0) == 2, "zero-copy slots seen: " << slots_seen(comm, 0));

    // A new allocation, likely where b was (freed first): its own slot; the sender must not write
    // into the old mapping.
    const size_t blen = b->n;
    b.reset();
    b = std::make_unique<Dev>(blen);
    for (int i = 0; i < 4; ++i) {
      src.n = blen - 5;
      if (rank == 0) src.fill(5000 + i);
      one_way(comm, rank, src, b->p + 5, blen - 5, s);
      if (rank == 1) MP_CHECK_MSG(b->check(5, blen - 5, 5000 + i) == SIZE_MAX, "realloc round " << i);
      comm.barrier();
    }
    if (rank == 1) MP_CHECK_MSG(slots_seen(comm, 0) == 3, "after realloc, slots seen: " << slots_seen(comm, 0));

    // Both directions in one group (sendrecv), 64 MB each way, zero-copy from the second round.
    const size_t len = size_t(64) << 20;
    for (int i = 0; i < 5; ++i) {
      src.n = len;
      src.fill(uint64_t(rank) * 100 + i);
      comm.group_start();
      comm.send(peer, src.p, len, s);
      comm.recv(peer, a.p + 64, len, s);
      comm.group_end();
      gpu::stream_sync(s);
      poll(comm);
      MP_CHECK_MSG(a.check(64, len, uint64_t(peer) * 100 + i) == SIZE_MAX, "exchange " << i);
      comm.barrier();
    }
    MP_CHECK_MSG(slots_seen(comm, peer) >= 1, "exchange: rank " << rank << " saw no zero-copy slot");
    gpu::stream_destroy(s);
  }, milliseconds(240000));
  EXPECT_EQ(fail, "");
}

// A recv into a zero-copy buffer captured and replayed 100 times with a changing payload; a second
// buffer first used inside the capture (no export there: staged in every replay) in the same graph;
// and VMM buffers (a shareable one, exported by file descriptor; one without a shareable handle,
// staged) used eagerly, then a cudaMalloc buffer that still goes zero-copy.
TEST(StreamGpuZeroCopy, GraphReplaysAndVmm) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sgz-graph");
  std::string fail = run_ranks(2, [&](int rank) {
    const int dev = pltest::gpu_test_device(rank);
    gpu::set_device(dev);
    Communicator comm(uid, rank, 2, dev, opts());
    const size_t len = (size_t(16) << 20) + 5;  // above Options::stream_direct_ipc_min
    Dev src(len), src2(len), warm(len), fresh(len);
    gpu::Stream s = gpu::stream_create();
    for (int i = 0; i < 4; ++i) {  // eager: export, bind, acknowledge
      if (rank == 0) src.fill(900 + i);
      one_way(comm, rank, src, warm.p, len, s);
      if (rank == 1) MP_CHECK_MSG(warm.check(0, len, 900 + i) == SIZE_MAX, "warm-up " << i);
      comm.barrier();
    }
    gpu::stream_begin_capture(s);
    if (rank == 0) {
      comm.send(1, src.p, len, s);
      comm.send(1, src2.p, len, s);
    } else {
      comm.recv(0, warm.p, len, s);
      comm.recv(0, fresh.p, len, s);
    }
    gpu::GraphExec g = gpu::stream_end_capture(s);
    for (int rep = 0; rep < 100; ++rep) {
      if (rank == 0) {
        src.fill(uint64_t(rep) * 2);
        src2.fill(uint64_t(rep) * 2 + 1);
      }
      gpu::graph_launch(g, s);
      gpu::stream_sync(s);
      if (rank == 1) {
        MP_CHECK_MSG(warm.check(0, len, uint64_t(rep) * 2) == SIZE_MAX, "replay " << rep << " (zero-copy)");
        MP_CHECK_MSG(fresh.check(0, len, uint64_t(rep) * 2 + 1) == SIZE_MAX, "replay " << rep << " (staged)");
      }
      comm.barrier();
    }
    poll(comm);
    gpu::graph_destroy(g);
    if (rank == 1) MP_CHECK_MSG(slots_seen(comm, 0) == 1, "graph: slots seen " << slots_seen(comm, 0));

    // VMM memory with a shareable handle, then without one (never exported: staged), then a new
    // cudaMalloc buffer, which still goes zero-copy (a refused export stages only its allocation).
    const size_t chunk = gpu::vmm_granularity(dev);
    const int chunks = int((len + chunk - 1) / chunk);
    for (bool shareable : {true, false}) {
      char* v = static_cast<char*>(gpu::vmm_test_alloc(dev, chunk, chunks, shareable));
      for (int i = 0; i < 4; ++i) {
        if (rank == 0) src.fill(7000 + i);
        one_way(comm, rank, src, v, len, s);
        if (rank == 1) {
          std::vector<char> h(len);
          gpu::memcpy_sync(h.data(), v, len);
          MP_CHECK_MSG(check_pattern(h.data(), len, 7000 + i) == SIZE_MAX,
                       "vmm round " << i << (shareable ? " (shareable)" : " (not shareable)"));
        }
        comm.barrier();
      }
      gpu::vmm_test_free(v, size_t(chunks) * chunk);
    }
    const int before = rank == 1 ? slots_seen(comm, 0) : 0;
    Dev later(len);
    for (int i = 0; i < 4; ++i) {
      if (rank == 0) src.fill(8000 + i);
      one_way(comm, rank, src, later.p, len, s);
      if (rank == 1) MP_CHECK_MSG(later.check(0, len, 8000 + i) == SIZE_MAX, "after vmm, round " << i);
      comm.barrier();
    }
    if (rank == 1) MP_CHECK_MSG(slots_seen(comm, 0) == before + 1, "after vmm: slots seen " << slots_seen(comm, 0)
                                                                                            << ", before " << before);
    gpu::stream_destroy(s);
  }, milliseconds(240000));
  EXPECT_EQ(fail, "");
}

// Small enough for compute-sanitizer racecheck (scripts/gpu_stream.sh): 1 MB (above the LL bound,
// with stream_direct_ipc_min lowered to it) each way in one group, four rounds into the same buffers (staged first, zero-copy once
// acknowledged).
TEST(StreamGpuZeroCopy, SanitizerSmall) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sgz-san");
  std::string fail = run_ranks(2, [&](int rank) {
    const int dev = pltest::gpu_test_device(rank);
    gpu::set_device(dev);
    Options o = opts();
    o.stream_direct_ipc_min = size_t(1) << 20;
    Communicator comm(uid, rank, 2, dev, o);
    const int peer = 1 - rank;
    const size_t len = size_t(1) << 20;
    Dev src(len), dst(len);
    gpu::Stream s = gpu::stream_create();
    for (int i = 0; i < 4; ++i) {
      src.fill(uint64_t(rank) * 10 + i);
      comm.group_start();
      comm.send(peer, src.p, len, s);
      comm.recv(peer, dst.p, len, s);
      comm.group_end();
      gpu::stream_sync(s);
      poll(comm);
      MP_CHECK_MSG(dst.check(0, len, uint64_t(peer) * 10 + i) == SIZE_MAX, "round " << i);
      comm.barrier();
    }
    gpu::stream_destroy(s);
  }, milliseconds(120000));
  EXPECT_EQ(fail, "");
}

// A receiver's post is untrusted: rank 1 (playing a hostile receiver) writes forged zero-copy posts
// straight into rank 0's area, as a buggy or hostile process could, instead of calling recv. The
// sending kernel must refuse each (a slot it never bound, a plain address from another process, an
// offset whose message would run past the bound allocation): nothing written, the pair stopped, the
// sender's next call reports a protocol violation; never a write outside the receiver's buffer.
TEST(StreamGpuZeroCopy, ForgedPostsStopThePair) {
  REQUIRE_GPUS();
  for (int variant = 0; variant < 3; ++variant) {
    std::string uid = unique_test_id("sgz-forge");
    std::string fail = run_ranks(2, [&](int rank) {
      const int dev = pltest::gpu_test_device(rank);
      gpu::set_device(dev);
      Options o = opts(20000);
      Communicator comm(uid, rank, 2, dev, o);
      const size_t len = (size_t(16) << 20) + 5;  // a zero-copy candidate
      Dev src(len), dst(len);
      gpu::Stream s = gpu::stream_create();
      for (int i = 0; i < 3; ++i) {  // legitimate messages 1-3: slot 0 exported, bound, acknowledged
        if (rank == 0) src.fill(40 + i);
        one_way(comm, rank, src, dst.p, len, s);
        if (rank == 1) MP_CHECK_MSG(dst.check(0, len, 40 + i) == SIZE_MAX, "message " << i + 1);
        comm.barrier();
      }
      if (rank == 1) MP_CHECK_MSG(slots_seen(comm, 0) == 1, "slots seen " << slots_seen(comm, 0));
      if (rank == 0) {
        comm.send(1, src.p, len, s);  // zero-copy candidate 4: its kernel waits for post 4
        comm.barrier();               // A: posted
        comm.barrier();               // B: forged
        gpu::stream_sync(s);          // returns: the kernel refused the post
        MP_CHECK_THROWS(poll(comm), Error, "protocol violation");
      } else {
        detail::StreamEngine& eng = detail::stream_engine(detail::services(comm));
        const size_t sec = stream::section_bytes(eng.slots(), eng.chunk_bytes(), true, stream::round_up(o.stream_ll_max, 8));
        const size_t at = stream::kHeaderBytes + size_t(rank) * sec + offsetof(stream::PairSection, direct_post);
        std::shared_ptr<void> hold;
        char* posts = static_cast<char*>(detail::services(comm).map_published(
            0, stream::kAreaBufId, 1, at, sizeof(stream::DirectPost) * stream::kDirectRing, "forge", &hold));
        comm.barrier();  // A
        const uint64_t d = 4;
        const uint64_t a = variant == 0   ? stream::ipc_post(7, 0)           // never bound
                           : variant == 1 ? reinterpret_cast<uint64_t>(src.p)  // an address, not a slot
                                          : stream::ipc_post(0, size_t(8) << 20);  // past the allocation's end
        const stream::DirectPost p{uint32_t(a), uint32_t(d), uint32_t(a >> 32), uint32_t(d)};
        gpu::memcpy_sync(posts + (d % stream::kDirectRing) * sizeof p, &p, sizeof p);
        comm.barrier();  // B
        MP_CHECK_MSG(dst.check(0, len, 42) == SIZE_MAX, "variant " << variant << ": the receive buffer changed");
      }
      comm.barrier();
      gpu::stream_destroy(s);
    }, milliseconds(120000));
    EXPECT_EQ(fail, "") << "variant " << variant;
  }
}
