// The adapter workers' pacing: spin while there is work or GPU copies are in flight, then sleep on
// the rank's doorbell (peers and local callers ring it), so an idle communicator costs no CPU.
#pragma once
#include <chrono>
#include <sys/prctl.h>
#include <thread>

#include "common/futex.h"

namespace peerlink::detail {

class WorkerLoop {
 public:
  // yield_in_spin: the spin after progress yields the core on every round. Host backend: there a
  // waiting thread completes most receives itself (Request::wait), and a worker that spun hot for
  // its 100 us after each message it handled took the core that thread and its peer needed (host
  // 8 B ring completion, 2 processes on 2 loaded cores: p50 55 us one way in some runs, 3-4 us with
  // the yield). GPU workers poll copy completion and keep spinning hot.
  WorkerLoop(common::Doorbell& bell, bool yield_in_spin) : bell_(bell), yield_in_spin_(yield_in_spin) {
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // short sleeps stay short
    last_progress_ = Clock::now();
    last_sweep_ = last_progress_;
  }
  uint32_t prepare() { return bell_.prepare(); }

  // Liveness sweeps of peers with pending work, every 100 ms.
  bool sweep_due() {
    auto now = Clock::now();
    if (now - last_sweep_ < std::chrono::milliseconds(100)) return false;
    last_sweep_ = now;
    return true;
  }

  // Whether idle() with these arguments sleeps (or may: the bell can still ring first).
  bool sleeps_next(bool moved, bool busy) const {
    return !(moved || busy) && Clock::now() - last_progress_ >= kSpin;
  }

  // moved: progress this round; pending: work waits on peers; busy: GPU copies in flight.
  void idle(bool moved, bool pending, bool busy, uint32_t ticket) {
    auto now = Clock::now();
    if (moved || busy) {  // busy: copy completion is polled, so keep polling
      last_progress_ = now;
      if (busy && !moved) std::this_thread::yield();
      return;
    }
    if (now - last_progress_ < kSpin) {  // spin briefly
      if (yield_in_spin_) std::this_thread::yield();
      return;
    }
    // Waiting on a peer: it rings our bell; the timeout only bounds liveness checks.
    bell_.wait(ticket, pending ? std::chrono::milliseconds(20) : std::chrono::milliseconds(1000));
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::microseconds kSpin{100};
  common::Doorbell& bell_;
  bool yield_in_spin_;
  Clock::time_point last_progress_, last_sweep_;
};

}  // namespace peerlink::detail
