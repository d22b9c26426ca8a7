// Completion on the waiting thread (transport/caller_progress.h), in real processes on the host
// backend: while a thread spins in Request::wait, the peer skips waking this rank's worker, so every
// way a request can end must still end promptly: the waiter spinning when the message comes, the
// message coming while nobody waits (the worker's), the waiter already asleep (the worker's, then
// a wake-up), test() polling, and a Request that outlives its communicator.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "peerlink/peerlink.h"
#include "support/mp.h"

using namespace peerlink;
using pltest::run_ranks;
using std::chrono::duration;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

// 200 ping-pongs with random pauses (0-2 ms) on both sides before each send and each wait, so that
// a message finds its receiver spinning, asleep after its 1 ms spin, or not waiting at all, and the
// receiver completes it by wait() or by polling test(). Payloads are checked. A stranded arrival (a
// skipped wake-up with nobody left to poll) costs the worker's 20 ms sleep: 200 of them would take
// 4 s, the run takes well under 1 s on 2 loaded cores; the bound is 4 s.
void no_arrival_is_stranded(Completion comp) {
  const std::string uid = pltest::unique_test_id("caller");
  std::string fails = run_ranks(2, [&](int rank) {
    Options o;
    o.timeout = milliseconds(10000);
    o.completion = comp;
    Communicator comm(uid, rank, 2, kHostDevice, o);
    MP_CHECK(comm.completion_with(1 - rank) == comp);
    const size_t n = 256;
    char* buf = static_cast<char*>(comm.alloc(n));
    comm.notify_ipc_buffer(1 - rank, 1, buf, n, 1);
    comm.wait_ipc_buffer(1 - rank, 1, 1);
    std::vector<char> src(n);
    std::mt19937 rng(1234 + rank);
    auto pause = [&] { std::this_thread::sleep_for(microseconds(rng() % 2000)); };
    comm.barrier();
    const auto t0 = steady_clock::now();
    for (int k = 0; k < 200; ++k) {
      const bool sender = (k % 2 == 0) == (rank == 0);
      if (sender) {
        pause();
        pltest::fill_pattern(src.data(), n, uint64_t(k));
        comm.send_direct(1 - rank, src.data(), n, 1, 1);
      } else {
        Request r = comm.irecv(1 - rank, 1, 0, n);
        pause();
        if (rng() % 3 == 0) {
          const auto until = steady_clock::now() + milliseconds(5000);
          while (!r.test()) {
            MP_CHECK_MSG(steady_clock::now() < until, "message " << k << " never completed by test()");
            std::this_thread::sleep_for(microseconds(50));
          }
        } else {
          r.wait(milliseconds(5000));
        }
        MP_CHECK_MSG(pltest::check_pattern(buf, n, uint64_t(k)) == SIZE_MAX, "message " << k);
      }
    }
    const double secs = duration<double>(steady_clock::now() - t0).count();
    std::fprintf(stderr, "[rank %d] 200 ping-pongs with pauses: %.2f s\n", rank, secs);
    MP_CHECK_MSG(secs < 4.0, secs << " s: arrivals waited for a worker nobody woke");
    comm.barrier();
  }, milliseconds(60000));
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

// A pending irecv whose communicator closes fails with the close error, and waiting on it (or
// testing it) afterwards touches nothing of the closed pair.
void request_outlives_its_communicator(Completion comp) {
  const std::string uid = pltest::unique_test_id("outlive");
  std::string fails = run_ranks(2, [&](int rank) {
    Options o;
    o.timeout = milliseconds(5000);
    o.completion = comp;
    Request r;
    {
      Communicator comm(uid, rank, 2, kHostDevice, o);
      char* buf = static_cast<char*>(comm.alloc(64));
      comm.notify_ipc_buffer(1 - rank, 1, buf, 64, 1);
      comm.barrier();
      r = comm.irecv(1 - rank, 1, 0, 64);  // never sent
      MP_CHECK(!r.test());
      comm.barrier();
      comm.close();
    }
    MP_CHECK_THROWS(r.test(), Error, "closed");
    MP_CHECK_THROWS(r.wait(milliseconds(100)), Error, "closed");
  }, milliseconds(30000));
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

}  // namespace

// Plain tests (not parameterized), so that the TSan run's filter (Mp*) includes them.
TEST(MpCallerCompletion, NoArrivalIsStrandedDoneSeq) { no_arrival_is_stranded(Completion::DoneSeq); }
TEST(MpCallerCompletion, NoArrivalIsStrandedRing) { no_arrival_is_stranded(Completion::Ring); }
TEST(MpCallerCompletion, RequestOutlivesItsCommunicatorDoneSeq) { request_outlives_its_communicator(Completion::DoneSeq); }
TEST(MpCallerCompletion, RequestOutlivesItsCommunicatorRing) { request_outlives_its_communicator(Completion::Ring); }
