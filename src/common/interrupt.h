// Options::interrupt_check, run from a blocking wait loop of the calling thread.
#pragma once
#include <chrono>
#include <functional>

namespace peerlink::common {

// One per wait. Rate-limited because the loops spin or sleep for microseconds at a time and the
// hook may be costly (Python's takes the GIL): it runs once kInterval has passed since the wait
// began or since its previous run, so a wait shorter than that never calls it. Without a hook,
// poll() does nothing at all (not even read the clock).
class InterruptPoll {
 public:
  // Well under the ~50 ms Options promises: the loops sleep up to 20 ms between polls.
  static constexpr std::chrono::milliseconds kInterval{20};

  explicit InterruptPoll(const std::function<void()>& hook)
      : hook_(hook ? &hook : nullptr), next_(hook_ ? Clock::now() + kInterval : Clock::time_point()) {}

  // May throw whatever the hook throws.
  void poll() {
    if (!hook_) return;
    const auto now = Clock::now();
    if (now < next_) return;
    next_ = now + kInterval;
    (*hook_)();
  }

 private:
  using Clock = std::chrono::steady_clock;
  const std::function<void()>* hook_;  // the caller's Options outlive the wait
  Clock::time_point next_;
};

}  // namespace peerlink::common
