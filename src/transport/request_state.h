// Shared completion state of one Request. Workers complete or fail it; the caller tests or waits.
#pragma once
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "common/format.h"
#include "common/futex.h"
#include "common/log.h"

namespace peerlink::detail {

struct RequestState {
  enum : uint32_t { kPending = 0, kDone = 1, kFailed = 2 };
  // Lets the waiting thread finish the request itself instead of waiting for a worker's wake-up
  // and then its own (transport/caller_progress.h). Null: only the workers complete it.
  class Progress {
   public:
    virtual ~Progress() = default;
    // Moves what this thread can of the request's pair (when its lock is free: else a worker or
    // another waiter is at it). True when anything moved.
    virtual bool poll() = 0;
    // Brackets a wait of a thread on the pair (its polls and sleeps). While any thread waits on a
    // pair, the peer's publications wake that thread (the rank's wait bell), not the worker.
    // end_wait() then polls once more, or wakes the worker when the pair's lock is taken, so that
    // an arrival published before the end is never left to a worker nobody woke.
    virtual void begin_wait() = 0;
    virtual void end_wait() = 0;
    // How long a wait may poll before it sleeps.
    virtual std::chrono::nanoseconds spin_window() = 0;
    // Within begin_wait ... end_wait: sleeps while `st` is pending, at most `timeout`, on the wait
    // bell, which the peer's next publication rings (one wake-up, where the worker's completion and
    // then its wake-up of the request took two), and so does the request's completion by anyone
    // else. Polls before it sleeps. False when the pair is closed: then sleep on the status.
    virtual bool sleep(RequestState& st, std::chrono::nanoseconds timeout) = 0;
  };
  std::shared_ptr<Progress> progress;
  // With progress: the doorbell its waiters sleep on (Progress::sleep) and how many do; completion
  // rings it only then. Valid while the transport lives, which is when anyone completes a request.
  common::Doorbell* bell = nullptr;
  std::atomic<uint32_t> bell_sleepers{0};
  std::atomic<uint32_t> status{kPending};
  // Waiters asleep on `status` (common::sleep_while): completion pays the wake-up system call only
  // when one sleeps (the caller spins first, so usually none does).
  std::atomic<uint32_t> sleepers{0};
  std::exception_ptr error;            // set before status becomes kFailed
  std::chrono::milliseconds timeout{60000};  // the communicator's bound for wait()
  // What the request is, formatted only when an error needs it (formatting costs more than a
  // whole steady-state send).
  const char* kind = "request";        // "isend to" / "irecv from"
  int peer = -1;
  uint32_t buf_id = 0;
  uint64_t offset = 0, len = 0, version = 0, seq = 0;
  std::string what() const;

  void complete() {
    status.store(kDone, std::memory_order_seq_cst);
    wake();
  }
  void fail(std::exception_ptr e) {
    uint32_t expected = kPending;
    error = std::move(e);
    if (status.compare_exchange_strong(expected, kFailed, std::memory_order_seq_cst)) wake();
  }
  // After `status` changed (seq_cst): whoever sleeps on it or on the bell.
  void wake() {
    common::wake_sleepers(status, sleepers);
    if (bell && bell_sleepers.load(std::memory_order_seq_cst) != 0) bell->ring();
  }
  // Sleeps while pending, at most `timeout` (spurious wake-ups allowed).
  void sleep(std::chrono::nanoseconds timeout) { common::sleep_while(status, kPending, sleepers, timeout); }
  bool pending() const { return status.load(std::memory_order_acquire) == kPending; }
};

inline std::string RequestState::what() const {
  return common::format("{} rank {} (buffer {}, offset {}, {} bytes{}, message {})", kind, peer, buf_id, offset, len,
                        version ? common::format(", version {}", version) : std::string(), seq);
}

}  // namespace peerlink::detail
