// Shared completion state of one Request. Workers complete or fail it; the caller tests or waits.
#pragma once
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <string>

#include "common/futex.h"
#include "common/log.h"

namespace peerlink::detail {

struct RequestState {
  enum : uint32_t { kPending = 0, kDone = 1, kFailed = 2 };
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
    common::wake_sleepers(status, sleepers);
  }
  void fail(std::exception_ptr e) {
    uint32_t expected = kPending;
    error = std::move(e);
    if (status.compare_exchange_strong(expected, kFailed, std::memory_order_seq_cst))
      common::wake_sleepers(status, sleepers);
  }
  // Sleeps while pending, at most `timeout` (spurious wake-ups allowed).
  void sleep(std::chrono::nanoseconds timeout) { common::sleep_while(status, kPending, sleepers, timeout); }
  bool pending() const { return status.load(std::memory_order_acquire) == kPending; }
};

inline std::string RequestState::what() const {
  return common::cat(kind, " rank ", peer, " (buffer ", buf_id, ", offset ", offset, ", ", len, " bytes",
                     version ? common::cat(", version ", version) : std::string(), ", message ", seq, ")");
}

}  // namespace peerlink::detail
