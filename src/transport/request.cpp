#include <thread>

#include "common/log.h"
#include "peerlink/errors.h"
#include "peerlink/request.h"
#include "transport/request_state.h"

namespace peerlink {

bool Request::test() {
  if (!state_) return true;
  uint32_t s = state_->status.load(std::memory_order_acquire);
  if (s == detail::RequestState::kFailed) std::rethrow_exception(state_->error);
  return s == detail::RequestState::kDone;
}

void Request::wait() { wait(state_ ? state_->timeout : std::chrono::milliseconds(0)); }

void Request::wait(std::chrono::milliseconds timeout) {
  if (!state_) return;
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  // Spin briefly (latency), then sleep on the status word (idle costs nothing). The spin is bounded
  // in time too: on a loaded machine each yield can give a whole time slice away, and 2000 of them
  // overran short timeouts by seconds.
  const auto spin_until = std::min(deadline, Clock::now() + std::chrono::milliseconds(1));
  for (int i = 0; i < 2000; ++i) {
    if (test()) return;
    if (i > 200) {
      if (Clock::now() > spin_until) break;
      std::this_thread::yield();
    }
  }
  while (!test()) {
    auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero())
      throw TimeoutError(common::cat(state_->what(), ": not complete after ", timeout.count(), " ms"));
    state_->sleep(std::min<std::chrono::nanoseconds>(left, std::chrono::milliseconds(100)));
  }
}

}  // namespace peerlink
