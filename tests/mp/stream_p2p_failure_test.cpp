// Stream-ordered send/recv on the host backend: a peer killed mid-stream, a stalled peer, bad input
// and group misuse (typed errors, nothing written, the channel still usable afterwards).
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "peerlink/peerlink.h"
#include "support/mp.h"

using namespace peerlink;
using pltest::run_ranks;
using std::chrono::duration_cast;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {
Options quick(int ms = 20000) {
  Options o = Options::from_env();
  o.timeout = milliseconds(ms);
  return o;
}
}  // namespace

// Rank 1 streams NCCL-form and published-form messages, then SIGKILLs itself; rank 0's blocked
// recv, and every later call with rank 1, fail with PeerLostError within about a second.
TEST(StreamFailure, PeerKilledMidStream) {
  const std::string uid = pltest::unique_test_id("skill");
  std::string fails = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, kHostDevice, quick(30000));
    char* pub = static_cast<char*>(comm.alloc(4096));
    comm.notify_ipc_buffer(1 - rank, 1, pub, 4096, 1);
    comm.barrier();
    std::vector<char> b(20000);
    if (rank == 0) {
      for (int k = 0; k < 5; ++k) {
        comm.recv(1, b.data(), b.size(), nullptr);
        MP_CHECK(pltest::check_pattern(b.data(), b.size(), uint64_t(k)) == SIZE_MAX);
        comm.recv(1, 1, 0, 4096, nullptr);
        MP_CHECK(pltest::check_pattern(pub, 4096, uint64_t(k)) == SIZE_MAX);
      }
      auto t0 = steady_clock::now();
      MP_CHECK_THROWS(comm.recv(1, b.data(), b.size(), nullptr), PeerLostError, "rank 1");
      auto dt = duration_cast<milliseconds>(steady_clock::now() - t0).count();
      MP_CHECK_MSG(dt < 1500, "noticed after " << dt << " ms");
      MP_CHECK_THROWS(comm.send(1, b.data(), 8, nullptr), PeerLostError, "rank 1");
      MP_CHECK_THROWS(comm.recv(1, 1, 0, 8, nullptr), PeerLostError, "rank 1");
      // A group naming the dead peer fails too (at the call that names it).
      comm.group_start();
      MP_CHECK_THROWS(comm.send(1, b.data(), 8, nullptr), PeerLostError, "rank 1");
      comm.group_end();
    } else {
      for (int k = 0; k < 5; ++k) {
        pltest::fill_pattern(b.data(), b.size(), uint64_t(k));
        comm.send(0, b.data(), b.size(), nullptr);
        comm.send(0, b.data(), 4096, 1, 0, 1, nullptr);
      }
      std::this_thread::sleep_for(milliseconds(100));
      raise(SIGKILL);
    }
  }, milliseconds(60000), {1});
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty()) << "segments left after a crash";
}

// The sender closes right after its sends completed (their bytes staged in the receiver's area): the
// receiver still gets every message, and only a recv with nothing left to take reports the lost
// peer. Before, each recv checked the peer first and failed although the bytes were there.
TEST(StreamFailure, SenderClosedAfterItsSendsCompleted) {
  const std::string uid = pltest::unique_test_id("sclosed");
  std::string fails = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, kHostDevice, quick(10000));
    std::vector<char> b(1000);
    if (rank == 1) {
      for (int k = 0; k < 4; ++k) {  // four messages fit the staging ring: each send completes alone
        pltest::fill_pattern(b.data(), b.size(), uint64_t(k) + 40);
        comm.send(0, b.data(), b.size(), nullptr);
        if (k == 0) comm.barrier();  // rank 0 took the first one (its channel is set up)
      }
      comm.barrier();
      comm.close();
      return;
    }
    comm.recv(1, b.data(), b.size(), nullptr);
    MP_CHECK(pltest::check_pattern(b.data(), b.size(), 40) == SIZE_MAX);
    comm.barrier();
    comm.barrier();  // rank 1 sent the other three and closes now
    std::this_thread::sleep_for(milliseconds(300));
    for (int k = 1; k < 4; ++k) {
      std::fill(b.begin(), b.end(), 0);
      comm.recv(1, b.data(), b.size(), nullptr);
      MP_CHECK_MSG(pltest::check_pattern(b.data(), b.size(), uint64_t(k) + 40) == SIZE_MAX, "message " << k);
    }
    auto t0 = steady_clock::now();
    MP_CHECK_THROWS(comm.recv(1, b.data(), b.size(), nullptr), PeerLostError, "rank 1");
    auto dt = duration_cast<milliseconds>(steady_clock::now() - t0).count();
    MP_CHECK_MSG(dt < 1500, "noticed after " << dt << " ms");
  }, milliseconds(30000));
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

// A live peer that never posts the matching call: TimeoutError after Options::timeout, naming the
// peer and the message, for both forms (the published-form send waits for the posted recv).
TEST(StreamFailure, StalledPeerTimesOut) {
  const std::string uid = pltest::unique_test_id("sstall");
  std::string fails = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, kHostDevice, quick(300));
    comm.check_async_error();  // no stream engine yet: none is created, nothing pending
    char* pub = static_cast<char*>(comm.alloc(4096));
    comm.notify_ipc_buffer(1 - rank, 1, pub, 4096, 1);
    comm.group_start();  // an empty group: sets up the stream engine (publishes its area)
    comm.group_end();
    comm.barrier();
    if (rank == 0) {
      std::vector<char> b(64);
      comm.send(1, b.data(), 64, nullptr);  // fits the staging ring: completes without the peer
      comm.send(1, b.data(), 0, nullptr);
      MP_CHECK_THROWS(comm.send(1, b.data(), 64, 1, 0, 1, nullptr), TimeoutError, "rank 1", "message 1");
      MP_CHECK_THROWS(comm.recv(1, b.data(), 64, nullptr), TimeoutError, "rank 1");
      // The host backend reports every failure at the call: nothing is left pending for
      // check_async_error (the GPU case is StreamGpu.MismatchAndStall), from any thread.
      comm.check_async_error();
      std::thread([&] { comm.check_async_error(); }).join();
      comm.close();
      MP_CHECK_THROWS(comm.check_async_error(), InvalidArgument, "closed");
    } else {
      comm.check_async_error();  // nothing pending
      // Stays alive without calling anything until rank 0 is done.
      std::this_thread::sleep_for(milliseconds(1500));
    }
  }, milliseconds(30000));
  EXPECT_EQ(fails, "");
}

// Bad input: typed errors naming the values, raised at the call, with nothing written anywhere;
// afterwards the pair still works (the bad call consumed no sequence number).
TEST(StreamFailure, BadInputAndGroupMisuse) {
  const std::string uid = pltest::unique_test_id("sbad");
  std::string fails = run_ranks(3, [&](int rank) {
    Communicator comm(uid, rank, 3, kHostDevice, quick(5000));
    const size_t cap = 1024;
    char* pub = static_cast<char*>(comm.alloc(cap));
    std::memset(pub, 0, cap);
    if (rank < 2) comm.notify_ipc_buffer(1 - rank, 4, pub, cap, 1);
    comm.barrier();
    std::vector<char> b(2 * cap, 0x11);
    if (rank == 0) {
      MP_CHECK_THROWS(comm.send(1, b.data(), cap + 1, 4, 0, 1, nullptr), InvalidArgument, "exceeds buffer 4",
                      "1024");
      MP_CHECK_THROWS(comm.send(1, b.data(), 16, 4, cap - 8, 1, nullptr), InvalidArgument, "exceeds");
      MP_CHECK_THROWS(comm.send(1, b.data(), 16, 4, 0, 0, nullptr), InvalidArgument, "version must be > 0");
      MP_CHECK_THROWS(comm.send(5, b.data(), 16, nullptr), InvalidArgument, "peer 5", "outside");
      MP_CHECK_THROWS(comm.send(-1, b.data(), 16, nullptr), InvalidArgument, "peer -1");
      MP_CHECK_THROWS(comm.recv(0, b.data(), 16, nullptr), InvalidArgument, "this rank itself");
      MP_CHECK_THROWS(comm.send(1, nullptr, 16, nullptr), InvalidArgument, "src is null");
      MP_CHECK_THROWS(comm.send(1, b.data(), 16, 0xFFFFFF01u, 0, 1, nullptr), InvalidArgument, "reserved");
      MP_CHECK_THROWS(comm.group_end(), InvalidArgument, "group_end without group_start");
      comm.group_start();
      MP_CHECK_THROWS(comm.group_start(), InvalidArgument, "do not nest");
      MP_CHECK_THROWS(comm.send(1, b.data(), cap + 1, 4, 0, 1, nullptr), InvalidArgument, "exceeds");  // not queued
      comm.group_end();  // empty: nothing to do
      comm.barrier();    // 1: rank 1 checks nothing arrived
      // Length mismatch between matched calls, both forms: InvalidArgument on both sides (NCCL form:
      // the receiver only), nothing written, and the next message of the channel is intact.
      pltest::fill_pattern(b.data(), 64, 42);
      MP_CHECK_THROWS(comm.send(1, b.data(), 32, 4, 0, 1, nullptr), InvalidArgument, "matching recv expects",
                      "nothing was written");
      comm.send(1, b.data(), 64, 4, 0, 1, nullptr);
      comm.send(1, b.data(), 100, nullptr);  // the receiver expects 50 bytes
      comm.send(1, b.data(), 64, nullptr);
    } else if (rank == 1) {
      MP_CHECK_THROWS(comm.recv(0, 4, 0, cap + 1, nullptr), InvalidArgument, "exceeds buffer 4", "1024");
      MP_CHECK_THROWS(comm.recv(0, 5, 0, 8, nullptr), InvalidArgument, "unknown buffer id 5");
      MP_CHECK_THROWS(comm.recv(2, 4, 0, 8, nullptr), InvalidArgument, "unknown buffer id 4");  // published to 0 only
      MP_CHECK_THROWS(comm.recv(0, nullptr, 8, nullptr), InvalidArgument, "dst is null");
      comm.barrier();  // 1
      for (size_t i = 0; i < cap; ++i) MP_CHECK_MSG(pub[i] == 0, "byte " << i << " written");
      MP_CHECK_THROWS(comm.recv(0, 4, 0, 64, nullptr), InvalidArgument, "matching send named", "len 32");
      for (size_t i = 0; i < cap; ++i) MP_CHECK_MSG(pub[i] == 0, "byte " << i << " written by a mismatched send");
      comm.recv(0, 4, 0, 64, nullptr);
      MP_CHECK(pltest::check_pattern(pub, 64, 42) == SIZE_MAX);
      std::vector<char> d(128, 0);
      MP_CHECK_THROWS(comm.recv(0, d.data(), 50, nullptr), InvalidArgument, "100 bytes", "expects 50");
      for (char c : d) MP_CHECK(c == 0);
      comm.recv(0, d.data(), 64, nullptr);
      MP_CHECK(pltest::check_pattern(d.data(), 64, 42) == SIZE_MAX);
    } else {
      comm.barrier();  // 1
    }
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
}
