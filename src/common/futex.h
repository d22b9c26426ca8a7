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

// The announce-then-sleep handshake (Doorbell below, the transport's requests): a waiter counts
// itself in `sleepers` before it rechecks `word`; a signaler changes `word` before it reads
// `sleepers`. seq_cst on both sides (a store then a load each), so the two cannot both miss each
// other (acquire/release alone allows that), and a signaler pays the system call only when
// someone sleeps.
inline void sleep_while(std::atomic<uint32_t>& word, uint32_t expected, std::atomic<uint32_t>& sleepers,
                        std::chrono::nanoseconds timeout) {
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (word.load(std::memory_order_seq_cst) == expected) futex_wait(&word, expected, timeout);
  sleepers.fetch_sub(1, std::memory_order_acq_rel);
}
// After the signaler changed `word` (seq_cst).
inline void wake_sleepers(std::atomic<uint32_t>& word, const std::atomic<uint32_t>& sleepers) {
  if (sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(&word);
}

// An event count in shared memory. Lives in SHM: trivially constructible, zero-initialized is valid.
struct alignas(64) Doorbell {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> sleepers;
  char pad[56];

  void ring() {
    seq.fetch_add(1, std::memory_order_seq_cst);
    wake_sleepers(seq, sleepers);
  }
  uint32_t prepare() { return seq.load(std::memory_order_acquire); }
  // Sleeps until ring() after prepare() returned `ticket`, or timeout.
  void wait(uint32_t ticket, std::chrono::nanoseconds timeout) { sleep_while(seq, ticket, sleepers, timeout); }
};
static_assert(sizeof(Doorbell) == 64, "Doorbell must fill one cache line");

}  // namespace peerlink::common
