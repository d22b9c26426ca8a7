// A mutex for locks held for well under a microsecond by threads that take them over and over:
// the transport's workers progress each pair under its send_mu / recv_mu on every spin round, and
// the caller's isend / irecv needs the same lock. std::mutex puts a caller that finds it held to
// sleep in the kernel at once, and the futex sleep plus wake-up cost microseconds on the latency
// path; this one retries first (2,000 pauses: 10-100 us, by the CPU's pause latency, no longer
// than the workers' own spin before they sleep), then sleeps as std::mutex does.
#pragma once
#include <mutex>
#include <thread>

namespace peerlink::common {

class SpinThenSleepMutex {
 public:
  void lock() {
    for (int i = 0; i < kSpins; ++i) {
      if (m_.try_lock()) return;
      relax();
    }
    m_.lock();
  }
  bool try_lock() { return m_.try_lock(); }
  void unlock() { m_.unlock(); }

 private:
  static constexpr int kSpins = 2000;  // far longer than a worker's round under the lock
  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#else
    std::this_thread::yield();
#endif
  }
  std::mutex m_;
};

}  // namespace peerlink::common
