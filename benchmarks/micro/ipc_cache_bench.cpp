// Micro-benchmarks of the IPC manager's caches (src/transport/ipc_manager.h) on the host backend:
// exporting a slice of an already-exported allocation, and re-binding a (peer, buffer id) whose
// publication did not change. Both run on every send; neither may reach the exporter or the OS.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "common/proc.h"
#include "gpu/backend.h"
#include "transport/ipc_manager.h"
#include "transport/registry.h"

namespace {

struct HostSetup {
  std::unique_ptr<peerlink::gpu::Backend> be;
  void* buf = nullptr;
  static constexpr size_t kBytes = size_t(1) << 20;
  HostSetup() {
    be = peerlink::gpu::make_backend(-1, "pl_plbench-micro-" + std::to_string(getpid()) + "_");
    buf = be->alloc(kBytes);
  }
  ~HostSetup() { be->free(buf); }
};

void BM_IpcExportCached(benchmark::State& st) {
  HostSetup h;
  peerlink::detail::IpcManager ipc(*h.be, peerlink::common::self_proc_id());
  uint64_t off = 0;
  ipc.export_range(h.buf, 4096, &off);  // first export: outside the loop
  size_t slice = 0;
  for (auto _ : st) {
    slice = (slice + 4096) % (HostSetup::kBytes - 4096);
    auto handle = ipc.export_range(static_cast<char*>(h.buf) + slice, 4096, &off);
    if (off != slice) st.SkipWithError("export returned the wrong offset");
    benchmark::DoNotOptimize(handle);
  }
  if (ipc.counters().exports.load() != 1) st.SkipWithError("the allocation was exported more than once");
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_IpcExportCached);

void BM_IpcBindCached(benchmark::State& st) {
  HostSetup h;
  peerlink::detail::IpcManager ipc(*h.be, peerlink::common::self_proc_id());
  peerlink::detail::Publication pub;
  pub.buf_id = 7;
  pub.version = 1;
  pub.len = 4096;
  pub.handle = ipc.export_range(h.buf, 4096, &pub.offset);
  for (auto _ : st) {
    auto b = ipc.bind(1, pub);
    if (!b.ptr) st.SkipWithError("bind returned no pointer");
    benchmark::DoNotOptimize(b.ptr);
  }
  if (ipc.counters().opens.load() > 1) st.SkipWithError("the peer allocation was opened more than once");
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_IpcBindCached);

}  // namespace
