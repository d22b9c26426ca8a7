// Micro-benchmarks of the done_seq completion channel: the sender's release store plus the
// receiver-side doorbell ring (what send_path does per signal), the receiver's poll, and the
// round trip of two threads signalling each other through one ChannelLayout (the cache-line
// transfer that bounds how fast a receiver can see a completion).
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "common/futex.h"
#include "transport/layout.h"

namespace {

using peerlink::detail::ChannelLayout;

void BM_DoneSeqSignal(benchmark::State& st) {
  alignas(64) ChannelLayout ch;
  std::memset(static_cast<void*>(&ch), 0, sizeof ch);
  alignas(64) peerlink::common::Doorbell bell{};
  uint64_t seq = 0;
  for (auto _ : st) {
    ch.done_lo_to_hi.value.store(++seq, std::memory_order_release);
    bell.ring();  // no sleeper: no system call
  }
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_DoneSeqSignal);

void BM_DoneSeqPoll(benchmark::State& st) {
  alignas(64) ChannelLayout ch;
  std::memset(static_cast<void*>(&ch), 0, sizeof ch);
  ch.done_hi_to_lo.value.store(42, std::memory_order_release);
  uint64_t k = 1;
  for (auto _ : st) {
    bool ready = ch.done_hi_to_lo.value.load(std::memory_order_acquire) >= k;
    benchmark::DoNotOptimize(ready);
  }
}
BENCHMARK(BM_DoneSeqPoll);

// Thread A signals k on lo->hi and waits for hi->lo >= k; thread B echoes. Time per round trip.
void BM_DoneSeqPingPong(benchmark::State& st) {
  alignas(64) ChannelLayout ch;
  std::memset(static_cast<void*>(&ch), 0, sizeof ch);
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    uint64_t seen = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      uint64_t v = ch.done_lo_to_hi.value.load(std::memory_order_acquire);
      if (v > seen) {
        seen = v;
        ch.done_hi_to_lo.value.store(v, std::memory_order_release);
      }
    }
  });
  uint64_t k = 0;
  for (auto _ : st) {
    ch.done_lo_to_hi.value.store(++k, std::memory_order_release);
    while (ch.done_hi_to_lo.value.load(std::memory_order_acquire) < k) {
    }
  }
  stop = true;
  echo.join();
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_DoneSeqPingPong)->UseRealTime();

}  // namespace
