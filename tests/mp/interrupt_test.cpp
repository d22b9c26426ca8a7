// Options::interrupt_check on the host backend: a hook that throws abandons each blocking wait
// (rendezvous with a missing rank, setup, a barrier, wait_ipc_buffer, a send waiting for a
// publication, a host allreduce) long before the timeout; the exception comes out unchanged,
// nothing is left in /dev/shm, an abandoned publication wait can be retried, and an abandoned
// barrier or collective refuses the next one while point-to-point calls keep working.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "peerlink/collectives.h"
#include "config/test_hooks.h"
#include "peerlink/peerlink.h"
#include "support/mp.h"

using namespace peerlink;
using pltest::run_ranks;
using namespace std::chrono;

namespace {

// Not a peerlink::Error: the library must pass any exception type through untouched.
struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted by the test hook") {}
};

// Counts the calls made while armed and throws on the kThrowAt-th; unarmed it does nothing, so
// the rest of a rank's life (construction, the calls after the interrupt) runs undisturbed.
struct TestHook {
  static constexpr int kThrowAt = 5;
  std::atomic<bool> armed{false};
  std::atomic<int> calls{0};
};

// Timeout 20 s: an interrupt that only takes effect when the wait returns fails the 2 s bounds.
Options with_hook(const std::shared_ptr<TestHook>& h) {
  Options o;
  o.timeout = milliseconds(20000);
  o.interrupt_check = [h] {
    if (h->armed.load() && ++h->calls >= TestHook::kThrowAt) throw Interrupted();
  };
  return o;
}

// Runs `call` with the hook armed; it must throw Interrupted within 2 s, after exactly kThrowAt
// hook calls (the hook ran repeatedly during the wait and the first throw ended it).
template <class F>
void expect_interrupted(const std::shared_ptr<TestHook>& h, const char* what, F&& call) {
  h->calls = 0;
  h->armed = true;
  auto t0 = steady_clock::now();
  MP_CHECK_THROWS(call(), Interrupted, "test hook");
  auto dt = duration_cast<milliseconds>(steady_clock::now() - t0).count();
  h->armed = false;
  MP_CHECK_MSG(dt < 2000, what << " abandoned after " << dt << " ms (timeout 20000 ms)");
  MP_CHECK_MSG(h->calls.load() == TestHook::kThrowAt, what << ": hook called " << h->calls.load() << " times");
}

// The idle rank's side: wait (hook unarmed) until the interrupted rank publishes buffer 9, then
// send it one message, which the interrupted rank receives to show point-to-point still works.
void idle_until_released(Communicator& comm) {
  comm.wait_ipc_buffer(0, 9, 1);
  std::vector<char> src(64);
  pltest::fill_pattern(src.data(), src.size(), 9);
  comm.send_direct(0, src.data(), src.size(), 9, 1);
}

void release_idle_peer(Communicator& comm) {
  char* buf = static_cast<char*>(comm.alloc(64));
  comm.notify_ipc_buffer(1, 9, buf, 64, 1);
  comm.irecv(1, 9, 0, 64).wait();
  MP_CHECK(pltest::check_pattern(buf, 64, 9) == SIZE_MAX);
}

TEST(MpInterrupt, ConstructorWaitingForMissingRank) {
  const std::string uid = pltest::unique_test_id("intr-ctor");
  std::string fails = run_ranks(1, [&](int) {  // rank 0 of 2; rank 1 never comes
    auto h = std::make_shared<TestHook>();
    expect_interrupted(h, "rendezvous", [&] { Communicator comm(uid, 0, 2, kHostDevice, with_hook(h)); });
    MP_CHECK_MSG(pltest::leftover_segments(uid).empty(), "the abandoned rendezvous left its segment");
    // The id is free again: a fresh job with it meets normally.
    Communicator alone(uid, 0, 1, kHostDevice, with_hook(h));
  }, milliseconds(30000));
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

// Interrupted after the rendezvous, while setup waits for rank 1 to open the done_seq channel
// (which it never does): the pair and channel segments rank 0 created by then are removed too,
// and rank 1, waiting for rank 0's decision, learns that rank 0 is gone.
TEST(MpInterrupt, ConstructorDuringSetup) {
  const std::string uid = pltest::unique_test_id("intr-setup");
  std::string fails = run_ranks(2, [&](int rank) {
    auto h = std::make_shared<TestHook>();
    Options o = with_hook(h);
    o.channel_ready_timeout = milliseconds(20000);
    if (rank == 1) {
      peerlink::detail::set_test_hook(o, &peerlink::detail::TestHooks::channel_never_ready);
      MP_CHECK_THROWS(Communicator(uid, 1, 2, kHostDevice, o), PeerLostError, "rank 0");
      return;
    }
    std::this_thread::sleep_for(milliseconds(200));  // rank 1 is waiting: our rendezvous is instant
    expect_interrupted(h, "setup", [&] { Communicator comm(uid, 0, 2, kHostDevice, o); });
  }, milliseconds(40000));
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

TEST(MpInterrupt, BarrierWithIdlePeer) {
  const std::string uid = pltest::unique_test_id("intr-barrier");
  std::string fails = run_ranks(2, [&](int rank) {
    auto h = std::make_shared<TestHook>();
    Communicator comm(uid, rank, 2, kHostDevice, with_hook(h));
    if (rank == 1) return idle_until_released(comm);
    expect_interrupted(h, "barrier", [&] { comm.barrier(); });
    // Our arrival is published: a retried barrier would pair with the peer's next one.
    MP_CHECK_THROWS(comm.barrier(), Error, "interrupted", "close the communicator");
    release_idle_peer(comm);  // memory and point-to-point calls still work
  }, milliseconds(40000));
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

TEST(MpInterrupt, WaitIpcBufferNeverPublished) {
  const std::string uid = pltest::unique_test_id("intr-wait");
  std::string fails = run_ranks(2, [&](int rank) {
    auto h = std::make_shared<TestHook>();
    Communicator comm(uid, rank, 2, kHostDevice, with_hook(h));
    if (rank == 1) {  // publishes buffer 5 only after rank 0 released it (buffer 9)
      comm.wait_ipc_buffer(0, 9, 1);
      char* buf = static_cast<char*>(comm.alloc(64));
      comm.notify_ipc_buffer(0, 5, buf, 64, 1);
      comm.barrier();
      return;
    }
    expect_interrupted(h, "wait_ipc_buffer", [&] { comm.wait_ipc_buffer(1, 5, 1); });
    // Also a send naming a version that was never published waits, and is abandoned alike.
    std::vector<char> src(64, 1);
    expect_interrupted(h, "isend (unpublished version)", [&] { comm.isend(1, src.data(), 64, 5, 0, 1); });
    char* buf = static_cast<char*>(comm.alloc(64));
    comm.notify_ipc_buffer(1, 9, buf, 64, 1);
    comm.wait_ipc_buffer(1, 5, 1);  // abandoning it changed nothing: the retry succeeds
    comm.barrier();                 // and the communicator is fully usable
  }, milliseconds(40000));
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

TEST(MpInterrupt, HostAllreduceWithIdlePeer) {
  const std::string uid = pltest::unique_test_id("intr-allreduce");
  std::string fails = run_ranks(2, [&](int rank) {
    auto h = std::make_shared<TestHook>();
    Communicator comm(uid, rank, 2, kHostDevice, with_hook(h));
    std::vector<float> x(256, float(rank + 1));
    allreduce(comm, x.data(), x.data(), x.size(), DataType::F32, ReduceOp::Sum);  // together: set up
    MP_CHECK(x[0] == 3.0f && x[255] == 3.0f);
    if (rank == 1) return idle_until_released(comm);
    // Alone: waits for rank 1's flags, in the collectives layer's own loop.
    expect_interrupted(h, "allreduce", [&] {
      allreduce(comm, x.data(), x.data(), x.size(), DataType::F32, ReduceOp::Sum);
    });
    MP_CHECK_THROWS(allreduce(comm, x.data(), x.data(), x.size(), DataType::F32, ReduceOp::Sum), Error,
                    "interrupted");
    MP_CHECK_THROWS(comm.barrier(), Error, "interrupted");
    release_idle_peer(comm);
  }, milliseconds(40000));
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

}  // namespace
