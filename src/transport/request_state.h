// Shared completion state of one Request. Workers complete or fail it; the caller tests or waits.
#pragma once
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <string>

#include "common/futex.h"

namespace peerlink::detail {

struct RequestState {
  enum : uint32_t { kPending = 0, kDone = 1, kFailed = 2 };
  std::atomic<uint32_t> status{kPending};
  std::exception_ptr error;            // set before status becomes kFailed
  std::chrono::milliseconds timeout{60000};  // the communicator's bound for wait()
  std::string what;                    // "isend to rank 1 (buf 3, 64 bytes)" for timeout messages

  void complete() {
    status.store(kDone, std::memory_order_release);
    common::futex_wake_all(&status);
  }
  void fail(std::exception_ptr e) {
    uint32_t expected = kPending;
    error = std::move(e);
    if (status.compare_exchange_strong(expected, kFailed, std::memory_order_acq_rel))
      common::futex_wake_all(&status);
  }
  bool pending() const { return status.load(std::memory_order_acquire) == kPending; }
};

}  // namespace peerlink::detail
