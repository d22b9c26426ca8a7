// A send/irecv round trip through the public API inside one process: two communicators of one
// job (ranks 0 and 1; host backend, or one GPU) on two threads. Rank 0 sends `size` bytes with send_direct and
// waits for the echo; rank 1 waits for the message and sends it back. Payloads are checked on both
// sides (a per-iteration tag in the first 8 bytes).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gpu/runtime.h"
#include "peerlink/peerlink.h"

namespace {

// Rank 1 on device `dev` (kHostDevice: host backend): echoes every message back until rank 0 raises
// `stop` (the message after it only wakes this rank).
void echo_rank(const std::string& uid, size_t size, int dev, const peerlink::Options& opts,
               const std::atomic<bool>& stop, std::atomic<bool>& failed) {
  try {
    if (dev >= 0) peerlink::gpu::set_device(dev);
    peerlink::Communicator c1(uid, 1, 2, dev, opts);
    void* in = c1.alloc(size);
    c1.notify_ipc_buffer(0, 1, in, size, 1);
    c1.wait_ipc_buffer(0, 1, 1);
    c1.barrier();
    while (true) {
      c1.irecv(0, 1, 0, size).wait();
      if (stop.load(std::memory_order_acquire)) break;
      c1.send_direct(0, in, size, 1, 1);  // echo the payload back
    }
    c1.barrier();
    c1.free(in);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "echo rank: %s\n", e.what());
    failed = true;
  }
}

// Rank 0 on this thread, `rank0(c0, out, back)` timing its round trips; the echo rank on another.
// Both communicators of one job on device `dev`; `out` (sent) and `back` (the echo lands there)
// are c0.alloc memory of `size` bytes.
template <class Rank0>
void with_echo(benchmark::State& st, const char* name, size_t size, int dev, Rank0 rank0) {
  static int run = 0;
  const std::string uid = std::string("plbench-micro-") + name + "-" + std::to_string(getpid()) + "-" +
                          std::to_string(run++);
  std::atomic<bool> stop{false}, echo_failed{false};
  peerlink::Options opts;
  opts.timeout = std::chrono::milliseconds(20000);
  std::thread echo([&] { echo_rank(uid, size, dev, opts, stop, echo_failed); });
  try {
    if (dev >= 0) peerlink::gpu::set_device(dev);
    peerlink::Communicator c0(uid, 0, 2, dev, opts);
    void* out = c0.alloc(size);
    void* back = c0.alloc(size);
    c0.notify_ipc_buffer(1, 1, back, size, 1);
    c0.wait_ipc_buffer(1, 1, 1);
    c0.barrier();
    rank0(c0, out, back);
    stop.store(true, std::memory_order_release);
    c0.send_direct(1, out, size, 1, 1);  // wakes the echo rank, which sees `stop`
    c0.barrier();
    c0.free(out);
    c0.free(back);
  } catch (const std::exception& e) {
    stop = true;
    st.SkipWithError(e.what());
  }
  echo.join();
  if (echo_failed) st.SkipWithError("echo rank failed (see stderr)");
}

void round_trip(peerlink::Communicator& c0, void* out, size_t size) {
  auto r = c0.irecv(1, 1, 0, size);
  c0.send_direct(1, out, size, 1, 1);
  r.wait();
}

// Host backend: a new tag in every message, each echo compared.
void BM_HostApiRoundTrip(benchmark::State& st) {
  const size_t size = static_cast<size_t>(st.range(0));
  with_echo(st, "rt", size, peerlink::kHostDevice, [&](peerlink::Communicator& c0, void* out, void* back) {
    std::memset(out, 0x5a, size);
    uint64_t tag = 0;
    for (auto _ : st) {
      ++tag;
      std::memcpy(out, &tag, std::min(size, sizeof tag));
      round_trip(c0, out, size);
      if (std::memcmp(back, out, size) != 0) {
        st.SkipWithError("echoed payload differs");
        break;
      }
    }
  });
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(size) * 2);
}
BENCHMARK(BM_HostApiRoundTrip)->Arg(8)->Arg(4096)->Arg(1 << 20)->UseRealTime();

// The same round trip between two communicators of one process on one GPU
// (PEERLINK_BENCH_DEVICES=D; registered only then): the GPU host path (copy kernel, done_seq in
// pinned memory, the workers, the caller's wait) without the time slicing of two processes on one
// GPU, and without NVLink. The payload is fixed while timed; three tagged round trips after the
// loop are checked.
void BM_GpuApiRoundTrip(benchmark::State& st) {
  const int dev = std::atoi(std::getenv("PEERLINK_BENCH_DEVICES"));
  const size_t size = static_cast<size_t>(st.range(0));
  with_echo(st, "grt", size, dev, [&](peerlink::Communicator& c0, void* out, void* back) {
    std::vector<char> h(size, 0x5a), got(size);
    peerlink::gpu::memcpy_sync(out, h.data(), size);
    for (auto _ : st) round_trip(c0, out, size);
    for (uint64_t tag = 1; tag <= 3; ++tag) {
      std::memcpy(h.data(), &tag, std::min(size, sizeof tag));
      peerlink::gpu::memcpy_sync(out, h.data(), size);
      round_trip(c0, out, size);
      peerlink::gpu::memcpy_sync(got.data(), back, size);
      if (std::memcmp(got.data(), h.data(), size) != 0) st.SkipWithError("echoed payload differs");
    }
  });
}
const bool kGpuRoundTripRegistered = [] {
  const char* env = std::getenv("PEERLINK_BENCH_DEVICES");
  if (!env || !*env) return false;
  benchmark::RegisterBenchmark("BM_GpuApiRoundTrip", BM_GpuApiRoundTrip)->Arg(8)->Arg(4096)->UseRealTime();
  return true;
}();

}  // namespace
