// Semantics across real processes on the host backend: FIFO matching with 1,000+ messages in
// flight, versions (republish, stale, newer), the done_seq -> ring fallback, the legacy path, the
// IPC cache, and two communicators in one process.
#include <gtest/gtest.h>

#include <thread>

#include "config/test_hooks.h"
#include "peerlink/peerlink.h"
#include "support/mp.h"

using namespace peerlink;
using pltest::run_ranks;

namespace {

Options test_opts() {
  Options o;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

class MpFifo : public testing::TestWithParam<Completion> {};

// 1,500 sends in flight before the receiver posts a single irecv; each lands at its own offset,
// carries its index, and the k-th irecv names the k-th send's range, so any reordering fails.
TEST_P(MpFifo, ThousandsInFlightKeepOrder) {
  const std::string uid = pltest::unique_test_id("fifo");
  const Completion comp = GetParam();
  std::string fails = run_ranks(2, [&](int rank) {
    Options o = test_opts();
    o.completion = comp;
    Communicator comm(uid, rank, 2, kHostDevice, o);
    const int n = 1500;
    const size_t msg = 24;
    if (rank == 1) {
      char* buf = static_cast<char*>(comm.alloc(n * msg));
      std::memset(buf, 0, n * msg);
      comm.notify_ipc_buffer(0, 1, buf, n * msg, 1);
      comm.barrier();  // sender starts; we post nothing until it has queued everything
      comm.barrier();
      std::vector<Request> rs;
      for (int k = 0; k < n; ++k) rs.push_back(comm.irecv(0, 1, k * msg, msg));
      for (int k = 0; k < n; ++k) {
        rs[k].wait();
        MP_CHECK_MSG(pltest::check_pattern(buf + k * msg, msg, k) == SIZE_MAX, "message " << k);
      }
    } else {
      comm.wait_ipc_buffer(1, 1, 1);
      comm.barrier();
      std::vector<char> src(n * msg);
      std::vector<Request> ss;
      for (int k = 0; k < n; ++k) {
        pltest::fill_pattern(&src[k * msg], msg, k);
        ss.push_back(comm.isend(1, &src[k * msg], msg, 1, k * msg, 1));
      }
      comm.barrier();
      for (auto& s : ss) s.wait();
      MP_CHECK(comm.completion_with(1) == (comp == Completion::Ring ? Completion::Ring : Completion::DoneSeq));
    }
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
}
INSTANTIATE_TEST_SUITE_P(Completions, MpFifo, testing::Values(Completion::DoneSeq, Completion::Ring),
                         [](const testing::TestParamInfo<Completion>& i) { return std::string(to_string(i.param)); });

// A k-th send and k-th irecv naming different ranges: the receiver gets InvalidArgument.
TEST(MpMatching, MismatchIsAnErrorOnTheReceiver) {
  const std::string uid = pltest::unique_test_id("mismatch");
  std::string fails = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, kHostDevice, test_opts());
    if (rank == 1) {
      char* buf = static_cast<char*>(comm.alloc(4096));
      comm.notify_ipc_buffer(0, 3, buf, 4096, 1);
      Request r = comm.irecv(0, 3, 0, 128);
      MP_CHECK_THROWS(r.wait(), InvalidArgument, "expected buffer 3 offset 0 len 128", "offset 64 len 100");
      Request ok = comm.irecv(0, 3, 0, 16);  // the pair keeps working afterwards
      ok.wait();
      MP_CHECK(pltest::check_pattern(buf, 16, 2) == SIZE_MAX);
    } else {
      comm.wait_ipc_buffer(1, 3, 1);
      std::vector<char> src(100);
      pltest::fill_pattern(src.data(), 100, 1);
      // Where the irecv is posted before the send is issued, the sender refuses the mismatching
      // send before any byte moves and fails too; otherwise only the receiver does.
      try {
        comm.send_direct(1, src.data(), 100, 3, 1, 64);
      } catch (const InvalidArgument& e) {
        MP_CHECK_MSG(std::string(e.what()).find("names a different (buffer, offset, len)") != std::string::npos, e.what());
      }
      pltest::fill_pattern(src.data(), 16, 2);
      comm.send_direct(1, src.data(), 16, 3, 1, 0);
    }
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
}

// Republishing the same triple is a no-op; a stale version is InvalidArgument; a newer version
// than published makes the sender wait until the receiver publishes it; a new version replaces
// (and closes) the sender's old mapping.
TEST(MpVersions, RepublishStaleAndNewer) {
  const std::string uid = pltest::unique_test_id("versions");
  std::string fails = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, kHostDevice, test_opts());
    if (rank == 1) {
      char* a = static_cast<char*>(comm.alloc(1 << 16));
      char* b = static_cast<char*>(comm.alloc(1 << 16));
      comm.notify_ipc_buffer(0, 9, a, 1 << 16, 1);
      comm.notify_ipc_buffer(0, 9, a, 1 << 16, 1);  // same triple: no-op
      MP_CHECK(comm.stats().exports == 1);
      MP_CHECK_THROWS(comm.notify_ipc_buffer(0, 9, b, 1 << 16, 1), InvalidArgument, "version 1", "already published");
      comm.irecv(0, 9, 0, 4096).wait();
      MP_CHECK(pltest::check_pattern(a, 4096, 11) == SIZE_MAX);
      comm.barrier();  // sender now asks for version 2 before it exists
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm.notify_ipc_buffer(0, 9, b, 1 << 16, 2);
      MP_CHECK_THROWS(comm.notify_ipc_buffer(0, 9, a, 1 << 16, 1), InvalidArgument, "stale version 1", "version 2");
      comm.irecv(0, 9, 100, 4096).wait();
      MP_CHECK(pltest::check_pattern(b + 100, 4096, 12) == SIZE_MAX);
      comm.barrier();
    } else {
      comm.wait_ipc_buffer(1, 9, 1);
      MP_CHECK(comm.stats().opens == 1);
      std::vector<char> src(4096);
      pltest::fill_pattern(src.data(), 4096, 11);
      comm.send_direct(1, src.data(), 4096, 9, 1);
      MP_CHECK(comm.stats().opens == 1);  // opened once, ahead of the send
      comm.barrier();
      pltest::fill_pattern(src.data(), 4096, 12);
      auto t0 = std::chrono::steady_clock::now();
      comm.send_direct(1, src.data(), 4096, 9, 2, 100);  // waits for version 2
      MP_CHECK(std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(200));
      MP_CHECK_THROWS(comm.send_direct(1, src.data(), 16, 9, 1), InvalidArgument, "stale version 1", "published version 2");
      CommStats st = comm.stats();
      MP_CHECK_MSG(st.opens == 2 && st.closes == 1, "opens " << st.opens << " closes " << st.closes);
      comm.barrier();
    }
  });
  EXPECT_EQ(fails, "");
}

// The higher rank never opens the done_seq channel: after the bound both sides use the ring.
TEST(MpFallback, ChannelNeverReadyBothSidesUseRing) {
  const std::string uid = pltest::unique_test_id("fallback");
  std::string fails = run_ranks(3, [&](int rank) {
    Options o = test_opts();
    peerlink::detail::set_test_hook(o, &peerlink::detail::TestHooks::channel_never_ready);
    o.channel_ready_timeout = std::chrono::milliseconds(200);
    Communicator comm(uid, rank, 3, kHostDevice, o);
    char* buf = static_cast<char*>(comm.alloc(3 * 256));
    for (int p = 0; p < 3; ++p)
      if (p != rank) comm.notify_ipc_buffer(p, 1, buf + p * 256, 256, 1);
    std::vector<Request> rs;
    for (int p = 0; p < 3; ++p)
      if (p != rank) rs.push_back(comm.irecv(p, 1, 0, 200));
    std::vector<char> src(200);
    pltest::fill_pattern(src.data(), 200, rank);
    for (int p = 0; p < 3; ++p)
      if (p != rank) {
        MP_CHECK(comm.completion_with(p) == Completion::Ring);
        comm.wait_ipc_buffer(p, 1, 1);
        comm.send_direct(p, src.data(), 200, 1, 1);
      }
    for (auto& r : rs) r.wait();
    for (int p = 0; p < 3; ++p)
      if (p != rank) MP_CHECK(pltest::check_pattern(buf + p * 256, 200, p) == SIZE_MAX);
    MP_CHECK(comm.stats().sends_ring == 2);
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
}

// Two communicators in one process: the pointer is used directly (no export/open round trip).
TEST(MpInProcess, TwoCommunicatorsInOneProcess) {
  const std::string uid = pltest::unique_test_id("inproc");
  std::string err;
  std::thread t1([&] {
    try {
      Communicator c1(uid, 1, 2, kHostDevice, test_opts());
      char* buf = static_cast<char*>(c1.alloc(1024));
      c1.notify_ipc_buffer(0, 4, buf, 1024, 1);
      c1.irecv(0, 4, 8, 512).wait();
      if (pltest::check_pattern(buf + 8, 512, 5) != SIZE_MAX) err += "payload wrong; ";
      c1.barrier();
    } catch (const std::exception& e) {
      err += e.what();
    }
  });
  try {
    Communicator c0(uid, 0, 2, kHostDevice, test_opts());
    c0.wait_ipc_buffer(1, 4, 1);
    std::vector<char> src(512);
    pltest::fill_pattern(src.data(), 512, 5);
    c0.send_direct(1, src.data(), 512, 4, 1, 8);
    if (c0.stats().opens != 0) err += "opened a handle of its own process; ";
    c0.barrier();
  } catch (const std::exception& e) {
    err += e.what();
  }
  t1.join();
  EXPECT_EQ(err, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

}  // namespace
