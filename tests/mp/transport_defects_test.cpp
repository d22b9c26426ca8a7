// Regression tests of the transport's failure rules (host backend, real processes):
//   - a send_direct that fails never touches src again (relay and version-0 direct)
//   - free() of a published buffer revokes it (senders and pending irecvs fail, nothing written)
//   - a version-0 send followed by a direct send into the same range lands in order
//   - a peer that dies during setup ends the done_seq channel wait at once; nothing is left
//   - a direct send that does not match the posted irecv writes nothing; both sides fail
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/mman.h>
#include <thread>

#include "config/test_hooks.h"
#include "peerlink/peerlink.h"
#include "support/mp.h"

using namespace peerlink;
using pltest::run_ranks;
using namespace std::chrono;

namespace {

Options opts(int ms = 20000) {
  Options o;
  o.timeout = milliseconds(ms);
  return o;
}

// Memory shared by the forked ranks of one test (created before the fork).
struct Shared {
  std::atomic<pid_t> pid[4];
};
Shared* make_shared_page() {
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return new (p) Shared{};
}

// Caller memory that vanishes: any later read of it crashes the process (and fails the test).
struct Vanishing {
  size_t n;
  char* p;
  explicit Vanishing(size_t bytes) : n(bytes) {
    p = static_cast<char*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  }
  void vanish() { munmap(p, n), p = nullptr; }
};

// Relay path: the receiver is stopped, so staging fills and the send times out part-way. After
// send_direct threw, src is unmapped; the receiver resumes: its irecv fails (the message was given
// up, no crash on the sender), and the pair keeps working.
TEST(MpGiveUp, RelaySendDirectTimeoutNeverReadsSrcAgain) {
  const std::string uid = pltest::unique_test_id("giveup-relay");
  Shared* sh = make_shared_page();
  std::string fails = run_ranks(2, [&](int rank) {
    Options o = opts(rank == 0 ? 600 : 5000);
    o.path = Path::Relay;
    o.relay_slots = 2;
    o.relay_chunk_bytes = 4096;
    Communicator comm(uid, rank, 2, kHostDevice, o);
    const size_t n = 64 << 10;
    if (rank == 1) {
      char* buf = static_cast<char*>(comm.alloc(n));
      comm.notify_ipc_buffer(0, 1, buf, n, 1);
      Request r = comm.irecv(0, 1, 0, n);
      sh->pid[1] = getpid();
      comm.barrier();
      raise(SIGSTOP);  // rank 0 continues us
      MP_CHECK_THROWS(r.wait(), InvalidArgument, "irecv from rank 0", "gave the message up");
      Request ok = comm.irecv(0, 1, 0, 512);
      ok.wait();
      MP_CHECK(pltest::check_pattern(buf, 512, 2) == SIZE_MAX);
    } else {
      comm.wait_ipc_buffer(1, 1, 1);
      comm.barrier();
      while (true) {  // until rank 1 is stopped
        char st = 0;
        FILE* f = std::fopen(("/proc/" + std::to_string(sh->pid[1].load()) + "/stat").c_str(), "r");
        if (f) std::fscanf(f, "%*d %*s %c", &st), std::fclose(f);
        if (st == 'T') break;
        std::this_thread::sleep_for(milliseconds(1));
      }
      Vanishing src(n);
      pltest::fill_pattern(src.p, n, 1);
      MP_CHECK_THROWS(comm.send_direct(1, src.p, n, 1, 1), TimeoutError, "isend to rank 1");
      src.vanish();
      kill(sh->pid[1].load(), SIGCONT);
      std::this_thread::sleep_for(milliseconds(200));  // the worker would read src now if it still could
      std::vector<char> small(512);
      pltest::fill_pattern(small.data(), 512, 2);
      comm.send_direct(1, small.data(), 512, 1, 1);
    }
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

// Direct path: a version-0 send_direct whose irecv is never posted times out waiting for its CTS;
// src is unmapped; then the receiver posts: no copy happens and the irecv fails.
class MpGiveUpDirect : public testing::TestWithParam<Completion> {};
TEST_P(MpGiveUpDirect, VersionZeroTimeoutNeverReadsSrcAgain) {
  const std::string uid = pltest::unique_test_id("giveup-direct");
  const Completion comp = GetParam();
  std::string fails = run_ranks(2, [&](int rank) {
    Options o = opts(rank == 0 ? 500 : 5000);  // the sender's wait times out; the receiver's barriers wait for it
    o.completion = comp;
    Communicator comm(uid, rank, 2, kHostDevice, o);
    const size_t n = 8192;
    if (rank == 1) {
      char* buf = static_cast<char*>(comm.alloc(n));
      std::memset(buf, 0, n);
      comm.notify_ipc_buffer(0, 1, buf, n, 1);
      comm.barrier();
      comm.barrier();  // rank 0's send_direct has failed
      MP_CHECK_THROWS(comm.irecv(0, 1, 0, n).wait(), InvalidArgument, "irecv from rank 0", "gave the message up");
      for (size_t i = 0; i < n; ++i) MP_CHECK_MSG(buf[i] == 0, "byte " << i << " was written");
      comm.barrier();
      Request ok = comm.irecv(0, 1, 0, 64);
      ok.wait();
      MP_CHECK(pltest::check_pattern(buf, 64, 3) == SIZE_MAX);
    } else {
      comm.wait_ipc_buffer(1, 1, 1);
      comm.barrier();
      Vanishing src(n);
      pltest::fill_pattern(src.p, n, 1);
      MP_CHECK_THROWS(comm.send_direct(1, src.p, n, 1, 0), TimeoutError, "isend to rank 1");
      src.vanish();
      comm.barrier();
      comm.barrier();  // rank 1 checked that nothing landed
      std::vector<char> small(64);
      pltest::fill_pattern(small.data(), 64, 3);
      comm.send_direct(1, small.data(), 64, 1, 1);
    }
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
}
INSTANTIATE_TEST_SUITE_P(Completions, MpGiveUpDirect, testing::Values(Completion::DoneSeq, Completion::Ring),
                         [](const testing::TestParamInfo<Completion>& i) { return std::string(to_string(i.param)); });

// A version-0 send waits for its CTS (the irecvs are posted late); a direct send into the
// same range right after it must land after it.
class MpFifoAcrossPaths : public testing::TestWithParam<Completion> {};
TEST_P(MpFifoAcrossPaths, VersionZeroThenDirectSameRangeLandInOrder) {
  const std::string uid = pltest::unique_test_id("fifo-paths");
  const Completion comp = GetParam();
  std::string fails = run_ranks(2, [&](int rank) {
    Options o = opts();
    o.completion = comp;
    Communicator comm(uid, rank, 2, kHostDevice, o);
    const size_t n = 4096;
    if (rank == 1) {
      char* buf = static_cast<char*>(comm.alloc(n));
      comm.notify_ipc_buffer(0, 1, buf, n, 1);
      comm.barrier();
      std::this_thread::sleep_for(milliseconds(200));  // both sends are queued by now
      Request a = comm.irecv(0, 1, 0, n), b = comm.irecv(0, 1, 0, n);
      a.wait();
      b.wait();
      size_t bad = pltest::check_pattern(buf, n, 2);
      MP_CHECK_MSG(bad == SIZE_MAX, "the later (direct) send was overwritten by the earlier one; byte " << bad);
    } else {
      comm.wait_ipc_buffer(1, 1, 1);
      comm.barrier();
      std::vector<char> first(n), second(n);
      pltest::fill_pattern(first.data(), n, 1);
      pltest::fill_pattern(second.data(), n, 2);
      Request a = comm.isend(1, first.data(), n, 1, 0, 0);
      Request b = comm.isend(1, second.data(), n, 1, 0, 1);
      a.wait();
      b.wait();
    }
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
}
INSTANTIATE_TEST_SUITE_P(Completions, MpFifoAcrossPaths, testing::Values(Completion::DoneSeq, Completion::Ring),
                         [](const testing::TestParamInfo<Completion>& i) { return std::string(to_string(i.param)); });

// The receiver posted irecv(0, 64); a 128-byte send into the same buffer writes nothing. The
// direct sender fails before any byte moves; on the relay the receiver refuses the chunks.
class MpLongerThanIrecv : public testing::TestWithParam<Path> {};
TEST_P(MpLongerThanIrecv, WritesNothingBothSidesLearn) {
  const std::string uid = pltest::unique_test_id("longer");
  const Path path = GetParam();
  std::string fails = run_ranks(2, [&](int rank) {
    Options o = opts();
    o.path = path;
    Communicator comm(uid, rank, 2, kHostDevice, o);
    const size_t n = 4096;
    if (rank == 1) {
      char* buf = static_cast<char*>(comm.alloc(n));
      std::memset(buf, 0x33, n);
      comm.notify_ipc_buffer(0, 1, buf, n, 1);
      Request r = comm.irecv(0, 1, 0, 64);
      comm.barrier();
      MP_CHECK_THROWS(r.wait(), InvalidArgument, "expected buffer 1 offset 0 len 64", "offset 0 len 128");
      for (size_t i = 0; i < n; ++i) MP_CHECK_MSG(buf[i] == 0x33, "byte " << i << " was written");
    } else {
      comm.wait_ipc_buffer(1, 1, 1);
      comm.barrier();
      std::vector<char> src(128, 0x44);
      if (path == Path::Relay)
        comm.send_direct(1, src.data(), 128, 1, 1);  // one-sided staging: the receiver refuses it
      else
        MP_CHECK_THROWS(comm.send_direct(1, src.data(), 128, 1, 1), InvalidArgument, "rank 1 rejected it",
                        "names a different (buffer, offset, len)");
    }
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
}
INSTANTIATE_TEST_SUITE_P(Paths, MpLongerThanIrecv, testing::Values(Path::Direct, Path::Relay),
                         [](const testing::TestParamInfo<Path>& i) { return std::string(to_string(i.param)); });

// free() of a published buffer with an irecv pending into it: the irecv fails naming the
// buffer and the peer, a sender naming it gets InvalidArgument, nothing is written anywhere.
class MpFreePublished : public testing::TestWithParam<Path> {};
TEST_P(MpFreePublished, RevokesPublicationAndFailsPendingIrecv) {
  const std::string uid = pltest::unique_test_id("freepub");
  const Path path = GetParam();
  std::string fails = run_ranks(2, [&](int rank) {
    Options o = opts();
    o.path = path;
    Communicator comm(uid, rank, 2, kHostDevice, o);
    const size_t n = 4096;
    if (rank == 1) {
      char* keep = static_cast<char*>(comm.alloc(n));
      char* buf = static_cast<char*>(comm.alloc(n));
      comm.notify_ipc_buffer(0, 1, buf + 256, 1024, 1);  // a slice: revoked with its allocation
      comm.notify_ipc_buffer(0, 2, keep, n, 1);
      Request r = comm.irecv(0, 1, 0, 64);
      comm.barrier();  // rank 0 has mapped buffer 1
      comm.free(buf);
      MP_CHECK_THROWS(r.wait(), InvalidArgument, "irecv from rank 0", "buffer 1", "was freed");
      MP_CHECK_THROWS(comm.irecv(0, 1, 0, 64), InvalidArgument, "buffer id 1", "freed");
      comm.barrier();
      comm.barrier();  // rank 0 tried to send into it
      MP_CHECK_THROWS(comm.notify_ipc_buffer(0, 2, keep, 64, 1), InvalidArgument, "already published");
    } else {
      comm.wait_ipc_buffer(1, 1, 1);
      comm.barrier();
      comm.barrier();  // rank 1 freed it
      std::vector<char> src(64, 0x44);
      MP_CHECK_THROWS(comm.send_direct(1, src.data(), 64, 1, 1), InvalidArgument, "buffer 1", "was freed by rank 1");
      MP_CHECK_THROWS(comm.wait_ipc_buffer(1, 1, 1), InvalidArgument, "was freed");
      comm.barrier();
    }
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}
INSTANTIATE_TEST_SUITE_P(Paths, MpFreePublished, testing::Values(Path::Direct, Path::Relay),
                         [](const testing::TestParamInfo<Path>& i) { return std::string(to_string(i.param)); });

// Rank 1 never opens the done_seq channel and dies during setup; rank 0, waiting for the
// channel (bound 20 s), fails with PeerLostError at once, and no segment of the job is left.
TEST(MpSetupDeath, ChannelWaitNoticesDeadPeerAndLeavesNothing) {
  const std::string uid = pltest::unique_test_id("setup-death");
  const std::string prefix = common::shm_prefix_for(uid);
  std::string fails = run_ranks(2, [&](int rank) {
    Options o = opts(20000);
    o.channel_ready_timeout = milliseconds(20000);
    if (rank == 1) {
      peerlink::detail::set_test_hook(o, &peerlink::detail::TestHooks::channel_never_ready);
      // Dies once rank 0 has created its channel (it then waits for us to open it).
      o.interrupt_check = [prefix] {
        for (const auto& n : common::list_segments(prefix))
          if (n.find("ch_0_1") != std::string::npos) raise(SIGKILL);
      };
      Communicator comm(uid, rank, 2, kHostDevice, o);
      MP_CHECK_MSG(false, "rank 1 should have died during setup");
    }
    auto t0 = steady_clock::now();
    MP_CHECK_THROWS(Communicator(uid, rank, 2, kHostDevice, o), PeerLostError, "rank 1");
    auto dt = duration_cast<milliseconds>(steady_clock::now() - t0).count();
    MP_CHECK_MSG(dt < 5000, "setup noticed the death after " << dt << " ms");
  }, milliseconds(60000), {1});
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty()) << "segments left after a death during setup";
}

// While a communicator is alive, no name of its setup is left in /dev/shm (only the
// allocations, which peers open by name later, and the rendezvous, which stays named while the job
// lives so that a second claimant of one of its ranks meets it).
TEST(MpSetupNames, OnlyAllocationsAreNamedAfterSetup) {
  const std::string uid = pltest::unique_test_id("names");
  const std::string prefix = common::shm_prefix_for(uid);
  std::string fails = run_ranks(3, [&](int rank) {
    Options o = opts();
    o.path = rank == 2 ? Path::Relay : Path::Auto;  // pairs with rank 2 relay
    Communicator comm(uid, rank, 3, kHostDevice, o);
    comm.alloc(64);
    comm.barrier();
    for (const auto& n : common::list_segments(prefix))
      MP_CHECK_MSG(n == prefix + "boot" || (n.find("_m") != std::string::npos && n.find("_r") != std::string::npos),
                   "left: " << n);
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

}  // namespace
