// Stream-ordered send/recv on the host backend: a peer killed mid-stream, a stalled peer, bad input
// and group misuse (typed errors, nothing written, the channel still usable afterwards).
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <algorithm>
#include <cstring>
#include <functional>
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

// The first stream-ordered calls of a pair whose peer makes none: every bad argument is
// InvalidArgument within 100 ms, named, with nothing written, instead of waiting out the timeout in
// the channel's setup (which waits for the peer's first stream call). What only the peer's
// publication decides (length, offset, stale version) fails as soon as that publication is known,
// here at once. Afterwards the pair works: no bad call consumed a sequence number.
TEST(StreamFailure, BadArgumentsFailFastOnAFreshPair) {
  const std::string uid = pltest::unique_test_id("sfresh");
  std::string fails = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, kHostDevice, quick(3000));
    char* pub = static_cast<char*>(comm.alloc(1024));
    pltest::fill_pattern(pub, 1024, 7 + uint64_t(rank));
    if (rank == 1) {
      comm.notify_ipc_buffer(0, 9, pub, 1024, 1);
      comm.notify_ipc_buffer(0, 9, pub, 1024, 2);  // a newer version: version 1 is stale now
    } else {
      comm.notify_ipc_buffer(1, 3, pub, 512, 1);
    }
    comm.barrier();
    if (rank == 0) {
      std::vector<char> src(2048);
      pltest::fill_pattern(src.data(), src.size(), 99);
      std::vector<char> dst(64, 0);
      auto fast = [](const char* what, const std::function<void()>& call, std::initializer_list<const char*> parts) {
        const auto t0 = steady_clock::now();
        try {
          call();
          MP_CHECK_MSG(false, what << " did not throw");
        } catch (const InvalidArgument& e) {
          for (const char* p : parts) MP_CHECK_MSG(std::string(e.what()).find(p) != std::string::npos, e.what());
        }
        const auto ms = duration_cast<milliseconds>(steady_clock::now() - t0).count();
        MP_CHECK_MSG(ms < 100, what << " took " << ms << " ms");
      };
      const char* s = src.data();
      fast("len > publication", [&] { comm.send(1, s, 1025, 9, 0, 2, nullptr); }, {"exceeds buffer 9", "1024"});
      fast("offset + len > publication", [&] { comm.send(1, s, 100, 9, 1000, 2, nullptr); }, {"offset 1000", "exceeds"});
      fast("offset + len overflows", [&] { comm.send(1, s, 8, 9, SIZE_MAX - 3, 2, nullptr); }, {"overflows"});
      fast("stale version", [&] { comm.send(1, s, 8, 9, 0, 1, nullptr); }, {"stale version 1", "version 2"});
      fast("version 0", [&] { comm.send(1, s, 8, 9, 0, 0, nullptr); }, {"version must be > 0"});
      fast("null src", [&] { comm.send(1, nullptr, 8, 9, 0, 2, nullptr); }, {"src is null"});
      fast("peer outside", [&] { comm.send(2, s, 8, 9, 0, 2, nullptr); }, {"peer 2", "outside"});
      fast("peer itself", [&] { comm.send(0, s, 8, 9, 0, 2, nullptr); }, {"this rank itself"});
      fast("reserved id", [&] { comm.send(1, s, 8, 0xFFFFFF01u, 0, 2, nullptr); }, {"reserved"});
      fast("recv len > own publication", [&] { comm.recv(1, 3, 0, 513, nullptr); }, {"exceeds buffer 3", "512"});
      fast("recv unknown id", [&] { comm.recv(1, 4, 0, 8, nullptr); }, {"unknown buffer id 4"});
      fast("recv overflow", [&] { comm.recv(1, 3, SIZE_MAX, 2, nullptr); }, {"overflows"});
      fast("recv peer outside", [&] { comm.recv(5, 3, 0, 8, nullptr); }, {"peer 5", "outside"});
      fast("NCCL send null src", [&] { comm.send(1, nullptr, 8, nullptr); }, {"src is null"});
      fast("NCCL recv null dst", [&] { comm.recv(1, nullptr, 8, nullptr); }, {"dst is null"});
      fast("NCCL send peer outside", [&] { comm.send(7, s, 8, nullptr); }, {"peer 7", "outside"});
      fast("NCCL recv peer outside", [&] { comm.recv(-1, dst.data(), 8, nullptr); }, {"peer -1", "outside"});
      fast("NCCL send to itself outside a group", [&] { comm.send(0, s, 8, nullptr); }, {"outside a group"});
      for (char c : dst) MP_CHECK(c == 0);
      MP_CHECK(pltest::check_pattern(pub, 1024, 7) == SIZE_MAX);  // our publication untouched
      comm.barrier();  // 1: rank 1 checks its buffer
      comm.send(1, s, 1024, 9, 0, 2, nullptr);  // the pair's first message
    } else {
      comm.barrier();  // 1
      MP_CHECK_MSG(pltest::check_pattern(pub, 1024, 8) == SIZE_MAX, "a bad send wrote into buffer 9");
      comm.recv(0, 9, 0, 1024, nullptr);
      MP_CHECK(pltest::check_pattern(pub, 1024, 99) == SIZE_MAX);
    }
    comm.barrier();
  }, milliseconds(30000));
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}
