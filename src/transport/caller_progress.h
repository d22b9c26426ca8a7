// Completion on the waiting thread: Request::wait / test of a request run PairProgress::poll,
// which takes the pair's lock when it is free (else a worker or another waiter is at it) and lets
// the link finish what has arrived, exactly as the worker would under the same lock. One object
// per pair and direction: receive (irecvs of direct links: done_seq words and descriptors, ring
// SEND_DONEs, matching, ACKs) and, on the host backend, send (the replies a send waits for).
// The transport closes them before it tears the pair down; a Request that outlives its
// communicator then polls nothing.
#pragma once
#include <atomic>
#include <chrono>
#include <thread>

#include "common/futex.h"
#include "shm/spsc_ring.h"
#include "transport/request_state.h"

namespace peerlink::detail {

class Transport;
struct Peer;

class PairProgress final : public RequestState::Progress {
 public:
  enum class Side { Recv, Send };
  // bell: this rank's wait bell, which the peer rings while a thread waits on the pair.
  PairProgress(Transport& t, Peer& p, Side side, common::Doorbell& bell) : t_(t), p_(p), side_(side), bell_(bell) {}

  common::Doorbell* bell() const { return &bell_; }
  bool poll() override;
  void begin_wait() override;
  void end_wait() override;
  bool sleep(RequestState& st, std::chrono::nanoseconds timeout) override;
  std::chrono::nanoseconds spin_window() override;
  // Spin windows: the peer's last thread ran on another CPU (a reply can come while we poll) or on
  // this one (it cannot run while we poll: sleep at once, which hands it the CPU).
  static constexpr std::chrono::microseconds kSpinOtherCpu{50};
  static constexpr std::chrono::microseconds kSpinSameCpu{0};
  // Closing: close_begin() turns every later call into a no-op; the transport then rings the bells
  // (sleepers leave) and close_wait() returns once no call is in flight. After it no call touches
  // the pair.
  void close_begin() { closed_.store(true, std::memory_order_seq_cst); }
  void close_wait() {
    while (users_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  }

 private:
  // enter(): counts this call in, unless closed (then the caller does nothing).
  bool enter() {
    users_.fetch_add(1, std::memory_order_seq_cst);
    if (!closed_.load(std::memory_order_seq_cst)) return true;
    leave();
    return false;
  }
  void leave() { users_.fetch_sub(1, std::memory_order_seq_cst); }
  shm::PaddedCounter* wait_count() const;

  Transport& t_;
  Peer& p_;
  Side side_;
  common::Doorbell& bell_;
  std::atomic<int> users_{0};
  std::atomic<bool> closed_{false};
};

}  // namespace peerlink::detail
