// Micro-benchmarks of request completion (src/transport/request_state.h + Request): the cost of
// completing and observing a request on one thread, and the latency of a completion made on one
// thread and seen by a Request::wait on another (how a worker hands a finished op to the caller).
#include <benchmark/benchmark.h>

#include <atomic>
#include <memory>
#include <thread>

#include "peerlink/request.h"
#include "transport/request_state.h"

namespace {

using peerlink::detail::RequestState;

void BM_RequestCompleteWait(benchmark::State& st) {
  for (auto _ : st) {
    auto s = std::make_shared<RequestState>();
    peerlink::Request r(s);
    s->complete();
    r.wait();
    benchmark::DoNotOptimize(r.test());
  }
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_RequestCompleteWait);

// Ping-pong of completions between two threads: the main thread completes `ping` and waits for
// `pong`, which the other thread completes after its wait on `ping` returned. Time per round trip.
void BM_RequestCrossThread(benchmark::State& st) {
  constexpr int kSlots = 1024;
  std::vector<std::shared_ptr<RequestState>> ping(kSlots), pong(kSlots);
  std::atomic<int64_t> rounds{-1};
  auto renew = [&] {
    for (int i = 0; i < kSlots; ++i) ping[i] = std::make_shared<RequestState>(), pong[i] = std::make_shared<RequestState>();
  };
  renew();
  std::atomic<bool> stop{false};
  std::atomic<int> generation{0};
  std::thread other([&] {
    int64_t i = 0;
    int gen = 0;
    while (true) {
      while (generation.load(std::memory_order_acquire) == gen && !stop.load()) {
      }
      if (stop.load()) return;
      gen = generation.load(std::memory_order_acquire);
      int64_t n = rounds.load();
      for (i = 0; i < n; ++i) {
        peerlink::Request(ping[i]).wait();
        pong[i]->complete();
      }
    }
  });
  while (st.KeepRunningBatch(kSlots)) {
    renew();
    rounds.store(kSlots);
    generation.fetch_add(1, std::memory_order_release);
    for (int i = 0; i < kSlots; ++i) {
      ping[i]->complete();
      peerlink::Request(pong[i]).wait();
    }
  }
  stop = true;
  other.join();
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_RequestCrossThread)->UseRealTime();

}  // namespace
