// Micro-benchmarks of the SPSC ring (src/shm/spsc_ring.h), the carrier of ring-path completions.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <thread>

#include "shm/spsc_ring.h"

namespace {

constexpr uint32_t kCap = 2048;

struct RingMem {
  void* mem = nullptr;
  RingMem() {
    size_t bytes = peerlink::shm::SpscRing::bytes_for(kCap);
    mem = std::aligned_alloc(64, (bytes + 63) & ~size_t(63));
    std::memset(mem, 0, bytes);
    peerlink::shm::SpscRing::init(mem, kCap);
  }
  ~RingMem() { std::free(mem); }
};

// One push and one pop on the same thread: the bookkeeping cost without cache-line transfers.
void BM_SpscRingPushPop(benchmark::State& st) {
  RingMem m;
  peerlink::shm::SpscRing ring(m.mem, kCap);
  peerlink::shm::RingMsg in{}, out{};
  uint64_t seq = 0;
  for (auto _ : st) {
    in.seq = ++seq;
    if (!ring.push(in)) st.SkipWithError("ring full");
    if (!ring.pop(&out) || out.seq != seq) st.SkipWithError("pop returned the wrong message");
    benchmark::DoNotOptimize(out);
  }
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_SpscRingPushPop);

// Producer thread streams messages, this thread pops them: throughput across cores, with every
// message's sequence checked.
void BM_SpscRingCrossThread(benchmark::State& st) {
  RingMem m;
  peerlink::shm::SpscRing prod(m.mem, kCap), cons(m.mem, kCap);
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    peerlink::shm::RingMsg msg{};
    uint64_t seq = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      msg.seq = seq + 1;
      if (prod.push(msg)) ++seq;
    }
  });
  peerlink::shm::RingMsg out{};
  uint64_t expect = 1;
  for (auto _ : st) {
    while (!cons.pop(&out)) {
    }
    if (out.seq != expect++) st.SkipWithError("out-of-order message");
  }
  stop = true;
  producer.join();
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_SpscRingCrossThread)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
