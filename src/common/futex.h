// Cross-process wait/wake on a 32-bit word in shared memory (futex without FUTEX_PRIVATE_FLAG, so it
// works across processes mapping the same SHM page).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>

namespace peerlink::common {

// Sleeps while *word == expected, at most `timeout`. Spurious wake-ups are allowed.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout);
void futex_wake_all(std::atomic<uint32_t>* word);

// An event count in shared memory: waiters announce themselves so that signalers pay a system call
// only when someone sleeps. Lives in SHM: trivially constructible, zero-initialized is valid.
// seq_cst on both sides (a store then a load each): the ringer's load of `sleepers` and the waiter's
// load of `seq` cannot both miss the other's update (acquire/release alone allows that).
struct alignas(64) Doorbell {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> sleepers;
  char pad[56];

  void ring() {
    seq.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(&seq);
  }
  uint32_t prepare() { return seq.load(std::memory_order_acquire); }
  // Sleeps until ring() after prepare() returned `ticket`, or timeout.
  void wait(uint32_t ticket, std::chrono::nanoseconds timeout) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (seq.load(std::memory_order_seq_cst) == ticket) futex_wait(&seq, ticket, timeout);
    sleepers.fetch_sub(1, std::memory_order_acq_rel);
  }
};
static_assert(sizeof(Doorbell) == 64, "Doorbell must fill one cache line");

}  // namespace peerlink::common
