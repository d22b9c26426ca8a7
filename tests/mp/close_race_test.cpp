// close() on one thread while other threads are inside calls of the same communicator. The rule
// (communicator.h): calls in flight either finish or fail with a typed peerlink::Error
// (InvalidArgument "closed" for a wait close() woke); close() wakes blocked waits, waits for every
// call to return (bounded), then frees the transport (freed under the calls, it would be a
// use-after-free, SIGSEGV). Host backend, real processes, many rounds with close() landing at
// different moments (before, during and after the calls block).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "peerlink/collectives.h"
#include "peerlink/peerlink.h"
#include "support/mp.h"

using namespace peerlink;
using pltest::run_ranks;
using namespace std::chrono;

namespace {

constexpr uint32_t kNeverPublished = 4242;  // rank 1 never publishes this buffer id
constexpr uint32_t kRank0Done = 4343;       // rank 0 never publishes it either: rank 1 waits on it

Options race_opts() {
  Options o;
  o.timeout = milliseconds(10000);  // a woken wait returns in ~20 ms; the bound only catches a hang
  return o;
}

// Runs `body` until it throws; records whether what it threw is a peerlink::Error.
void until_error(std::atomic<int>& untyped, std::atomic<int>& typed, const std::function<void()>& body) {
  try {
    for (;;) body();
  } catch (const Error&) {
    ++typed;
  } catch (...) {
    ++untyped;
  }
}

// Rank 0: threads inside blocking and non-blocking calls, close() from the main thread after a
// random delay. Rank 1: joins the warm-up allreduce, then waits for rank 0 to go away.
void race_round(int rank, const std::string& uid, unsigned seed) {
  Communicator comm(uid, rank, 2, kHostDevice, race_opts());
  float x = 1;
  allreduce(comm, &x, &x, 1, DataType::F32, ReduceOp::Sum);  // collectives set up on both ranks
  MP_CHECK(x == 2);
  if (rank == 1) {
    // Returns when rank 0 closed (PeerLostError: it left) or its close woke nothing here.
    try {
      comm.wait_ipc_buffer(0, kRank0Done, 1);
    } catch (const Error&) {
    }
    return;
  }
  std::atomic<int> untyped{0}, typed{0}, finished{0};
  void* mem = comm.alloc(4096);
  std::vector<std::thread> threads;
  // Blocking waits, each woken by close().
  threads.emplace_back([&] { until_error(untyped, typed, [&] { comm.barrier(); }); });
  threads.emplace_back([&] { until_error(untyped, typed, [&] { comm.wait_ipc_buffer(1, kNeverPublished, 1); }); });
  threads.emplace_back([&] {
    until_error(untyped, typed, [&] {
      float y = 1;
      allreduce(comm, &y, &y, 1, DataType::F32, ReduceOp::Sum);  // rank 1 never joins: blocks
    });
  });
  threads.emplace_back([&] {
    until_error(untyped, typed, [&] {
      Request r = comm.irecv(1, 7, 0, 64);  // rank 1 never sends: fails when close() fails it
      r.wait();
    });
  });
  // Non-blocking calls in a tight loop: close() lands between and inside them.
  threads.emplace_back([&] {
    until_error(untyped, typed, [&] {
      (void)comm.path_to(1);
      (void)comm.stats();
      comm.notify_ipc_buffer(1, 9, mem, 4096, 1);
      void* p = comm.alloc(64);
      comm.free(p);
    });
  });
  std::mt19937 rng(seed);
  std::this_thread::sleep_for(microseconds(rng() % 3000));
  comm.close();
  ++finished;
  for (auto& t : threads) t.join();
  MP_CHECK_MSG(untyped.load() == 0, untyped.load() << " thread(s) ended with a non-peerlink exception");
  MP_CHECK_MSG(typed.load() == int(threads.size()), typed.load() << " typed errors for " << threads.size() << " threads");
  // After close every call is InvalidArgument "closed"; stats are zeros, not a crash.
  MP_CHECK_THROWS(comm.barrier(), InvalidArgument, "closed");
  MP_CHECK_THROWS(comm.wait_ipc_buffer(1, 1, 1), InvalidArgument, "closed");
  MP_CHECK(comm.stats().exports == 0);
}

}  // namespace

TEST(MpCloseRace, CloseWhileOtherThreadsAreInCalls) {
  for (int round = 0; round < 12; ++round) {
    std::string uid = pltest::unique_test_id("close-race");
    std::string fail = run_ranks(2, [&](int rank) { race_round(rank, uid, 1234u + round); }, milliseconds(30000));
    ASSERT_EQ(fail, "") << "round " << round;
    EXPECT_TRUE(pltest::leftover_segments(uid).empty()) << "round " << round;
  }
}

// close() wakes a barrier promptly (the closing check runs in the wait's interrupt hook), far
// below the communicator's timeout.
TEST(MpCloseRace, CloseWakesABlockedBarrierPromptly) {
  std::string uid = pltest::unique_test_id("close-wake");
  std::string fail = run_ranks(2, [&](int rank) {
    Options o = race_opts();
    o.timeout = milliseconds(20000);
    Communicator comm(uid, rank, 2, kHostDevice, o);
    if (rank == 1) {
      try {
        comm.wait_ipc_buffer(0, kRank0Done, 1);
      } catch (const Error&) {
      }
      return;
    }
    std::atomic<bool> woke{false};
    std::string what;
    std::thread t([&] {
      try {
        comm.barrier();
      } catch (const InvalidArgument& e) {
        what = e.what();
        woke = true;
      }
    });
    std::this_thread::sleep_for(milliseconds(100));
    auto t0 = steady_clock::now();
    comm.close();
    auto ms = duration_cast<milliseconds>(steady_clock::now() - t0).count();
    t.join();
    MP_CHECK_MSG(woke.load(), "barrier did not fail with InvalidArgument");
    MP_CHECK_MSG(what.find("closed") != std::string::npos, what);
    MP_CHECK_MSG(ms < 2000, "close() took " << ms << " ms");
  });
  EXPECT_EQ(fail, "");
}
