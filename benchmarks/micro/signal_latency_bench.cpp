// The floor under the host-driven GPU path: how long from the host's launch of
// the small-send kernel (gpu::launch_copy_signal: copy, system fence, store of a completion value
// into pinned host memory) until the host sees that value. A host-API message pays this once
// per direction plus the transport's own work, so one-way minus this figure is what software
// can still remove. Registered when PEERLINK_BENCH_DEVICES names a device (its first entry is
// used); the copy is 8 bytes between two buffers of that device. Counter `launch_us`: the
// launch call alone, on the host. BM_GpuArmedLaneToHostFlag: the armed sends that replace it.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "gpu/armed_lane.h"
#include "gpu/owners.h"
#include "gpu/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace gpu = peerlink::gpu;

void BM_GpuLaunchToHostFlag(benchmark::State& st) {
  const int dev = std::atoi(std::getenv("PEERLINK_BENCH_DEVICES"));
  gpu::set_device(dev);
  auto src = gpu::DeviceAlloc::create(dev, 64), dst = gpu::DeviceAlloc::create(dev, 64);
  auto flag = gpu::MappedHostAlloc::create(dev, 64);
  auto stream = gpu::StreamOwner::create(dev);
  const uint64_t pattern = 0x0123456789abcdefull;
  gpu::memcpy_sync(src.get(), &pattern, sizeof pattern);
  auto* word = static_cast<volatile uint64_t*>(flag.get());
  void* word_dev = gpu::host_device_pointer(flag.get());
  uint64_t v = 0;
  double launch_s = 0;
  for (auto _ : st) {
    auto t0 = Clock::now();
    gpu::launch_copy_signal(dst.get(), src.get(), 8, word_dev, ++v, stream.get());
    launch_s += std::chrono::duration<double>(Clock::now() - t0).count();
    while (*word != v) {
      if (Clock::now() - t0 > std::chrono::seconds(1)) {
        st.SkipWithError("the completion value never reached host memory");
        return;
      }
    }
  }
  gpu::stream_sync(stream.get());
  uint64_t got = 0;
  gpu::memcpy_sync(&got, dst.get(), sizeof got);
  if (got != pattern) st.SkipWithError("the copied 8 bytes differ");
  st.counters["launch_us"] = benchmark::Counter(launch_s * 1e6 / double(st.iterations()));
}

// The same send through an ArmedLane (gpu/armed_lane.h), as the GPU host path issues it: range 0
// with a kernel armed for it (the lane armed after the previous send, 10 us before this one),
// range 1 with the armed kernel cancelled (idle past its window: a plain launch). Timed: send()
// until the host sees the value; the re-arm after it is outside the time.
void BM_GpuArmedLaneToHostFlag(benchmark::State& st) {
  const bool expired = st.range(0) == 1;
  const int dev = std::atoi(std::getenv("PEERLINK_BENCH_DEVICES"));
  gpu::set_device(dev);
  auto src = gpu::DeviceAlloc::create(dev, 64), dst = gpu::DeviceAlloc::create(dev, 64);
  auto flag = gpu::MappedHostAlloc::create(dev, 64);
  const uint64_t pattern = 0x0fedcba987654321ull;
  gpu::memcpy_sync(src.get(), &pattern, sizeof pattern);
  auto* word = static_cast<volatile uint64_t*>(flag.get());
  void* word_dev = gpu::host_device_pointer(flag.get());
  const auto window = std::chrono::microseconds(50);
  gpu::ArmedLane lane(dev, window);
  uint64_t v = 0;
  for (auto _ : st) {
    lane.arm();
    const auto armed = Clock::now();
    while (Clock::now() - armed < std::chrono::microseconds(10)) {
    }
    if (expired) lane.idle(true);
    auto t0 = Clock::now();
    lane.send(dst.get(), src.get(), 8, word_dev, ++v);
    while (*word != v) {
      if (Clock::now() - t0 > std::chrono::seconds(1)) {
        st.SkipWithError("the completion value never reached host memory");
        return;
      }
    }
    st.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  lane.disarm();
  gpu::stream_sync(lane.stream());
  uint64_t got = 0;
  gpu::memcpy_sync(&got, dst.get(), sizeof got);
  if (got != pattern) st.SkipWithError("the copied 8 bytes differ");
}

const bool kRegistered = [] {
  const char* env = std::getenv("PEERLINK_BENCH_DEVICES");
  if (!env || !*env) return false;
  benchmark::RegisterBenchmark("BM_GpuLaunchToHostFlag", BM_GpuLaunchToHostFlag)->UseRealTime();
  benchmark::RegisterBenchmark("BM_GpuArmedLaneToHostFlag", BM_GpuArmedLaneToHostFlag)->Arg(0)->Arg(1)->UseManualTime();
  return true;
}();

}  // namespace
