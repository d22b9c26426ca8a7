// Completion of a request wakes a sleeping waiter (RequestState::sleepers): the completer skips the
// futex wake when nobody announced sleep, so a missed announcement would leave the waiter asleep
// until its timeout. Each round below sleeps with a 2 s timeout and must return long before it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "peerlink/errors.h"
#include "peerlink/request.h"
#include "transport/request_state.h"

using namespace peerlink;
using detail::RequestState;
using Clock = std::chrono::steady_clock;

namespace {

// One round: a waiter sleeps on `r`, the completer finishes it as soon as the waiter announced
// itself (the tightest race between the waiter's status check and its futex wait), or after
// `delay` (the waiter is then certainly asleep in the kernel).
Clock::duration round_trip(bool fail, std::chrono::microseconds delay) {
  auto r = std::make_shared<RequestState>();
  Clock::time_point woke;
  std::thread waiter([&] {
    while (r->pending()) r->sleep(std::chrono::seconds(2));
    woke = Clock::now();
  });
  while (r->sleepers.load() == 0) std::this_thread::yield();
  if (delay.count()) std::this_thread::sleep_for(delay);
  const auto done_at = Clock::now();
  if (fail) r->fail(std::make_exception_ptr(Error("failed on purpose")));
  else r->complete();
  waiter.join();
  EXPECT_EQ(r->sleepers.load(), 0u);
  return woke - done_at;
}

}  // namespace

TEST(RequestWake, CompletionWakesASleeper) {
  for (int i = 0; i < 300; ++i) {
    auto late = round_trip(i % 2 == 1, std::chrono::microseconds(i % 3 == 0 ? 2000 : 0));
    ASSERT_LT(late, std::chrono::seconds(1)) << "round " << i << ": the waiter slept through the completion";
  }
}

TEST(RequestWake, NoSleeperNoWakeNeeded) {
  auto r = std::make_shared<RequestState>();
  r->complete();  // nobody waits: returns without a system call, and the state is final
  EXPECT_FALSE(r->pending());
  EXPECT_EQ(r->sleepers.load(), 0u);
  auto start = Clock::now();
  r->sleep(std::chrono::seconds(2));  // not pending: returns at once
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
}

TEST(RequestWake, WaitReturnsPromptlyAfterItsSpinPhase) {
  // Request::wait spins about 1 ms, then sleeps in slices of 100 ms: a completion made once it
  // sleeps must wake it, not a slice's end (a lost wake-up costs >= 100 ms per round: 20 rounds
  // would take 2 s).
  const auto start = Clock::now();
  for (int i = 0; i < 20; ++i) {
    auto r = std::make_shared<RequestState>();
    Request req(r);
    std::thread completer([&] {
      while (r->sleepers.load() == 0) std::this_thread::yield();
      r->complete();
    });
    req.wait(std::chrono::seconds(5));
    completer.join();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
}
