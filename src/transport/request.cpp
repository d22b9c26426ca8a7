#include "peerlink/request.h"

#include <optional>
#include <thread>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "transport/request_state.h"

namespace peerlink {
namespace {

// Without a Progress: polls that do not yield, then polls that yield, for at most this long.
constexpr int kPollsBeforeYield = 20;
constexpr std::chrono::microseconds kSpinWindow{100};

// Progress::begin_wait ... end_wait, also when the wait throws.
class WaitScope {
 public:
  explicit WaitScope(detail::RequestState::Progress* p) : p_(p) { p_->begin_wait(); }
  ~WaitScope() { p_->end_wait(); }
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  detail::RequestState::Progress* p_;
};

}  // namespace

bool Request::test() {
  if (!state_) return true;
  uint32_t s = state_->status.load(std::memory_order_acquire);
  // Pending: complete it on this thread where its pair allows (an irecv whose done_seq came).
  if (s == detail::RequestState::kPending && state_->progress && state_->progress->poll())
    s = state_->status.load(std::memory_order_acquire);
  if (s == detail::RequestState::kFailed) std::rethrow_exception(state_->error);
  return s == detail::RequestState::kDone;
}

void Request::wait() { wait(state_ ? state_->timeout : std::chrono::milliseconds(0)); }

void Request::wait(std::chrono::milliseconds timeout) {
  if (!state_) return;
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  // Spin briefly (latency), then sleep (idle costs nothing). test() completes what this thread
  // can: while it polls, an arrival completes here with no wake-up at all; asleep on the wait
  // bell (Progress::sleep), the peer's publication wakes it and it completes the request itself.
  // (Before, a worker completed every receive and then woke the waiter: host, 8 B one way between
  // 2 processes on 2 loaded cores, 105-157 us p50.) With a Progress the spin never yields: on a
  // loaded machine a yield gave whole time slices to other programs (p99 8-12 ms); its length is
  // the Progress's choice (spin_window). Without one (relay pairs) the former spin stays: polls,
  // then yielding polls, bounded in time, then sleep on the status until a worker completes it.
  if (test()) return;  // done already (a host send): no wait to announce
  detail::RequestState::Progress* p = state_->progress.get();
  std::optional<WaitScope> waiting;
  if (p) waiting.emplace(p);
  const auto spin_until = std::min(deadline, Clock::now() + (p ? p->spin_window() : kSpinWindow));
  for (int i = 0;; ++i) {
    if (test()) return;
    if (p ? (i & 15) == 15 && Clock::now() >= spin_until : i >= kPollsBeforeYield) {
      if (Clock::now() >= spin_until) break;
      if (!p) std::this_thread::yield();
    }
  }
  while (!test()) {
    auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero())
      throw TimeoutError(common::format("{}: not complete after {} ms", state_->what(), timeout.count()));
    const auto slice = std::min<std::chrono::nanoseconds>(left, std::chrono::milliseconds(100));
    if (!p || !p->sleep(*state_, slice)) state_->sleep(slice);
  }
}

}  // namespace peerlink
