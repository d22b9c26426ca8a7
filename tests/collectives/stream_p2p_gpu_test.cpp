// Stream-ordered send/recv on GPUs, correctness (2 ranks, device = rank; failures are in
// stream_p2p_gpu_fail_test.cpp). Runs only when PEERLINK_TEST_GPUS >= 2:
//   make BACKEND=cuda BUILD=build-cuda -j lib tests
//   PEERLINK_TEST_GPUS=2 build-cuda/bin/peerlink_tests --gtest_filter='StreamGpu*'
// The parent never touches the GPU runtime before forking. Payloads are verified on the host.
#include <chrono>
#include <cstring>
#include <vector>

#include "stream_gpu_harness.h"

using namespace pltest;
using namespace pltest::stream_gpu;
using namespace peerlink;
namespace gpu = peerlink::gpu;
using std::chrono::milliseconds;

// Both forms, sizes from empty to 256 MB (multi-block published copies; NCCL form pipelined through
// the 64 x 128 KB staging slots by up to 64 blocks, slots reused many times over), exchanged in one
// group on one stream each way.
TEST(StreamGpu, ExchangeBothForms) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sg-ex");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts());
    const int peer = 1 - rank;
    const size_t sizes[] = {0,
                            8,
                            4099,
                            (size_t(128) << 10) + 3,
                            size_t(1) << 20,
                            (size_t(3) << 20) + 5,
                            size_t(4) << 20,
                            size_t(64) << 20,
                            (size_t(256) << 20) - 7};
    const size_t cap = size_t(256) << 20;
    Dev src(cap), dst(cap), pub(cap);
    comm.notify_ipc_buffer(peer, 1, pub.p, cap, 1);
    comm.barrier();
    gpu::Stream s = gpu::stream_create();
    uint64_t k = 0;
    for (size_t len : sizes) {
      for (int form = 0; form < 2; ++form, ++k) {
        src.n = len;
        src.fill(uint64_t(rank) * 1000 + k);
        comm.group_start();
        if (form == 0) {
          comm.send(peer, src.p, len, s);
          comm.recv(peer, dst.p, len, s);
        } else {
          comm.send(peer, src.p, len, 1, 0, 1, s);
          comm.recv(peer, 1, 0, len, s);
        }
        comm.group_end();
        gpu::stream_sync(s);
        poll(comm);
        const Dev& got = form == 0 ? dst : pub;
        size_t bad = got.check(0, len, uint64_t(peer) * 1000 + k);
        MP_CHECK_MSG(bad == SIZE_MAX, "form " << form << " len " << len << " byte " << bad);
        comm.barrier();
      }
    }
    gpu::stream_destroy(s);
  }, milliseconds(180000));
  EXPECT_EQ(fail, "");
}

// Thousands of messages enqueued without any host wait (rank 0 sends, rank 1 receives into distinct
// slices), both forms interleaved; verified in order after one stream sync.
TEST(StreamGpu, ThousandsInFlight) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sg-many");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts());
    const int kMsgs = 2000;
    const size_t kLen = 1000;
    Dev src(kMsgs * kLen), dst(kMsgs * kLen), pub(kMsgs * kLen);
    if (rank == 1) comm.notify_ipc_buffer(0, 2, pub.p, kMsgs * kLen, 1);
    comm.barrier();
    gpu::Stream s = gpu::stream_create();
    if (rank == 0) {
      std::vector<char> h(kMsgs * kLen);
      for (int i = 0; i < kMsgs; ++i) fill_pattern(h.data() + i * kLen, kLen, uint64_t(i));
      gpu::memcpy_sync(src.p, h.data(), h.size());
    }
    for (int i = 0; i < kMsgs; ++i) {
      if (rank == 0) {
        comm.send(1, src.p + i * kLen, kLen, s);
        if (i % 4 == 0) comm.send(1, src.p + i * kLen, kLen, 2, size_t(i) * kLen, 1, s);
      } else {
        comm.recv(0, dst.p + i * kLen, kLen, s);
        if (i % 4 == 0) comm.recv(0, 2, size_t(i) * kLen, kLen, s);
      }
    }
    gpu::stream_sync(s);
    poll(comm);
    if (rank == 1)
      for (int i = 0; i < kMsgs; ++i) {
        MP_CHECK_MSG(dst.check(i * kLen, kLen, uint64_t(i)) == SIZE_MAX, "message " << i);
        if (i % 4 == 0) MP_CHECK_MSG(pub.check(i * kLen, kLen, uint64_t(i)) == SIZE_MAX, "published message " << i);
      }
    comm.barrier();
    gpu::stream_destroy(s);
  }, milliseconds(180000));
  EXPECT_EQ(fail, "");
}

// A group {send, recv} per form captured once and replayed 1,000 times with a new payload each
// time: the device-resident sequence counters move every replay's messages, in order.
TEST(StreamGpu, GraphReplay1000) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sg-graph");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts());
    const int peer = 1 - rank;
    const size_t kSmall = 4096, kBig = (size_t(2) << 20) + 17;
    Dev a(kSmall), b(kBig), ra(kSmall), rb(kBig), pub(kSmall);
    comm.notify_ipc_buffer(peer, 3, pub.p, kSmall, 1);
    comm.barrier();
    gpu::Stream s = gpu::stream_create();
    poll(comm);  // engine set up (and areas mapped) outside the capture
    comm.group_start();
    comm.send(peer, a.p, kSmall, 3, 0, 1, s);
    comm.send(peer, b.p, kBig, s);
    comm.recv(peer, 3, 0, kSmall, s);
    comm.recv(peer, rb.p, kBig, s);
    comm.group_end();  // eager round first: maps everything
    gpu::stream_sync(s);
    gpu::stream_begin_capture(s);
    comm.group_start();
    comm.send(peer, a.p, kSmall, 3, 0, 1, s);
    comm.send(peer, b.p, kBig, s);
    comm.recv(peer, 3, 0, kSmall, s);
    comm.recv(peer, rb.p, kBig, s);
    comm.group_end();
    gpu::GraphExec g = gpu::stream_end_capture(s);
    for (int rep = 0; rep < 1000; ++rep) {
      a.fill(uint64_t(rep) * 4 + rank);
      if (rep % 50 == 0) b.fill(uint64_t(rep) * 4 + 2 + rank);
      gpu::graph_launch(g, s);
      gpu::stream_sync(s);
      MP_CHECK_MSG(pub.check(0, kSmall, uint64_t(rep) * 4 + peer) == SIZE_MAX, "replay " << rep);
      if (rep % 50 == 0) MP_CHECK_MSG(rb.check(0, kBig, uint64_t(rep) * 4 + 2 + peer) == SIZE_MAX, "replay " << rep);
      comm.barrier();  // the peer read its result before our next replay overwrites it
    }
    poll(comm);
    gpu::graph_destroy(g);
    gpu::stream_destroy(s);
  }, milliseconds(240000));
  EXPECT_EQ(fail, "");
}

// Several messages of different sizes per channel in one group (the NCCL form's chunks of all of
// them are dealt to the blocks round robin; each published message is split across the blocks of
// its channel), odd offsets and lengths, then the same group captured and replayed with large
// messages: every replay's payload verified.
TEST(StreamGpu, MultiBlockGroupsAndLargeReplay) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sg-mb");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts());
    const int peer = 1 - rank;
    // 20 KB + 5 at an odd offset: an LL message over several blocks with two lines per thread
    // (ll_write / ll_read's pair loop) through its unaligned byte paths.
    const size_t lens[] = {(size_t(300) << 10) + 3, 8, (size_t(1) << 20), (size_t(9) << 20) + 1, 0, 77,
                           (size_t(20) << 10) + 5};
    const size_t n = sizeof(lens) / sizeof(lens[0]);
    size_t total = 0;
    std::vector<size_t> offs;
    for (size_t len : lens) {
      offs.push_back(total);
      total += len + 13;  // odd offsets: the copies' unaligned paths too
    }
    Dev src(total), dst(total), pub(total);
    comm.notify_ipc_buffer(peer, 5, pub.p, total, 1);
    comm.barrier();
    gpu::Stream s = gpu::stream_create();
    auto group = [&] {
      comm.group_start();
      for (size_t i = 0; i < n; ++i) {
        comm.send(peer, src.p + offs[i], lens[i], s);
        comm.send(peer, src.p + offs[i], lens[i], 5, offs[i], 1, s);
      }
      for (size_t i = 0; i < n; ++i) {
        comm.recv(peer, dst.p + offs[i], lens[i], s);
        comm.recv(peer, 5, offs[i], lens[i], s);
      }
      comm.group_end();
    };
    auto verify = [&](uint64_t tag, const char* what, int rep) {
      // The source pattern starts at src.p, so a message at offs[i] carries the pattern's bytes
      // [offs[i], offs[i] + len): compare each landing range byte for byte against a host copy.
      std::vector<char> want(total), got(total), gotp(total);
      fill_pattern(want.data(), total, tag);
      gpu::memcpy_sync(got.data(), dst.p, total);
      gpu::memcpy_sync(gotp.data(), pub.p, total);
      for (size_t i = 0; i < n; ++i) {
        MP_CHECK_MSG(std::memcmp(got.data() + offs[i], want.data() + offs[i], lens[i]) == 0,
                     what << " rep " << rep << " NCCL form message " << i << " len " << lens[i]);
        MP_CHECK_MSG(std::memcmp(gotp.data() + offs[i], want.data() + offs[i], lens[i]) == 0,
                     what << " rep " << rep << " published message " << i << " len " << lens[i]);
      }
    };
    src.fill(uint64_t(rank) + 100);
    group();
    gpu::stream_sync(s);
    poll(comm);
    verify(uint64_t(peer) + 100, "eager", 0);
    comm.barrier();
    gpu::stream_begin_capture(s);
    group();
    gpu::GraphExec g = gpu::stream_end_capture(s);
    for (int rep = 0; rep < 20; ++rep) {
      src.fill(uint64_t(rep) * 2 + rank + 200);
      comm.barrier();  // the peer verified our previous landing before we refill its source
      gpu::graph_launch(g, s);
      gpu::stream_sync(s);
      poll(comm);
      verify(uint64_t(rep) * 2 + peer + 200, "graph", rep);
      comm.barrier();
    }
    gpu::graph_destroy(g);
    gpu::stream_destroy(s);
  }, milliseconds(240000));
  EXPECT_EQ(fail, "");
}

// Small case for compute-sanitizer racecheck (scripts/gpu_stream.sh): one exchange per form.
TEST(StreamGpu, SanitizerSmall) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sg-san");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts());
    const int peer = 1 - rank;
    Dev src(4096), dst(4096), pub(4096);
    comm.notify_ipc_buffer(peer, 1, pub.p, 4096, 1);
    comm.barrier();
    gpu::Stream s = gpu::stream_create();
    src.fill(uint64_t(rank) + 11);
    comm.group_start();
    comm.send(peer, src.p, 4096, s);
    comm.recv(peer, dst.p, 4096, s);
    comm.send(peer, src.p, 4096, 1, 0, 1, s);
    comm.recv(peer, 1, 0, 4096, s);
    comm.group_end();
    gpu::stream_sync(s);
    poll(comm);
    MP_CHECK(dst.check(0, 4096, uint64_t(peer) + 11) == SIZE_MAX);
    MP_CHECK(pub.check(0, 4096, uint64_t(peer) + 11) == SIZE_MAX);
    comm.barrier();
    gpu::stream_destroy(s);
  }, milliseconds(120000));
  EXPECT_EQ(fail, "");
}
