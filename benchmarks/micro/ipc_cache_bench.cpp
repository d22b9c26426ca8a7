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
  // Rank 0 exports (as another "process", so the bind really opens), rank 1 binds: a host backend
  // refuses to open one of its own allocations as a peer's buffer (a forged handle would).
  const std::string job = "pl_plbench-micro-" + std::to_string(getpid()) + "-bind_";
  auto be0 = peerlink::gpu::make_backend(-1, job + "r0_");
  auto be1 = peerlink::gpu::make_backend(-1, job + "r1_");
  void* buf = be0->alloc(HostSetup::kBytes);
  peerlink::detail::IpcManager exporter(*be0, peerlink::common::ProcId{1, 1});
  peerlink::detail::IpcManager ipc(*be1, peerlink::common::self_proc_id());
  peerlink::detail::Publication pub;
  pub.buf_id = 7;
  pub.version = 1;
  pub.len = 4096;
  pub.handle = exporter.export_range(buf, 4096, &pub.offset);
  for (auto _ : st) {
    auto b = ipc.bind(0, pub);
    if (!b.ptr) st.SkipWithError("bind returned no pointer");
    benchmark::DoNotOptimize(b.ptr);
  }
  if (ipc.counters().opens.load() > 1) st.SkipWithError("the peer allocation was opened more than once");
  st.SetItemsProcessed(st.iterations());
  ipc.close_all();
  be0->free(buf);
}
BENCHMARK(BM_IpcBindCached);

}  // namespace
