// Windows for the buffers of captured collectives (graph_windows.h): lookup, the agreement of the
// ranks on reusing one, registration and the graphs' references.
#include "collectives/graph_windows.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "collectives/coll_state.h"
#include "common/format.h"
#include "common/log.h"
#include "gpu/runtime.h"
#include "gpu/vmm.h"  // RelaxedCaptureMode
#include "peerlink/errors.h"
#include "transport/services.h"

namespace peerlink::coll {
namespace {

// A graph's reference, dropped on a runtime thread once the graph and its executables are gone.
void drop_graph_ref(void* p) {
  auto* ref = static_cast<std::shared_ptr<std::atomic<int>>*>(p);
  (*ref)->fetch_sub(1, std::memory_order_acq_rel);
  delete ref;
}

// The allocation holding [buf, +bytes), or 0 when the backend cannot export it.
uint64_t alloc_of(detail::CommServices& svc, const void* buf, size_t bytes) {
  try {
    size_t off = 0;
    return svc.export_memory(buf, bytes, &off).alloc_id;
  } catch (const Error&) {
    return 0;
  }
}

// The graph being captured on `stream` takes one reference to g (once per capture); without user
// objects g stays mapped until close() (a graph may replay it at any time).
void hold(GraphWindow& g, void* stream) {
  if (!gpu::capture_retain_supported()) {
    g.pinned = true;
    return;
  }
  const uint64_t cid = gpu::capture_id(stream);
  if (cid == 0 || cid == g.capture_id) return;
  g.graphs->fetch_add(1, std::memory_order_acq_rel);
  auto* ref = new std::shared_ptr<std::atomic<int>>(g.graphs);
  if (!gpu::capture_retain(stream, drop_graph_ref, ref)) {  // throws: the runtime drops ref itself
    drop_graph_ref(ref);
    return;
  }
  g.capture_id = cid;
}

}  // namespace

void release_unheld_graph_windows(CollState& st) {
  auto& wins = st.graph_windows().wins;
  auto unheld = [](const std::unique_ptr<GraphWindow>& g) {
    return !g->eager && !g->pinned && g->graphs->load(std::memory_order_acquire) == 0;
  };
  if (std::none_of(wins.begin(), wins.end(), unheld)) return;
  gpu::DeviceGuard dg(st.host() ? -1 : st.device());
  wins.erase(std::remove_if(wins.begin(), wins.end(), unheld), wins.end());  // PeerMapping unmaps
}

const Window* graph_window(CollState& st, const void* buf, size_t bytes, void* stream) {
  detail::CommServices& svc = st.svc();
  gpu::DeviceGuard dg(st.host() ? -1 : st.device());
  // Exports, opens and pointer queries are no stream work: legal during the capture in any mode.
  std::optional<gpu::RelaxedCaptureMode> relaxed;
  if (stream) relaxed.emplace();
  const uint64_t alloc = alloc_of(svc, buf, bytes);
  auto& wins = st.graph_windows().wins;
  GraphWindow* hit = nullptr;
  for (auto& g : wins)
    if (alloc != 0 && g->alloc_id == alloc && g->w.base == buf && g->w.bytes >= bytes) hit = g.get();
  // Each rank names the window it would reuse; unless all name the same one, all register anew
  // (a rank whose buffer moved to a new allocation, or that released its window, lacks it).
  const uint64_t mine = hit ? hit->w.id : 0;
  std::unique_ptr<uint64_t[]> named(new uint64_t[st.world()]);
  svc.allgather(&mine, sizeof mine, named.get());
  bool reuse = mine != 0;
  for (int p = 0; p < st.world(); ++p) reuse = reuse && named[p] == mine;
  if (!reuse) {
    if (!stream) {  // eager (coll_graph_register 2): an older eager window of this address goes
      auto same_base = [&](const std::unique_ptr<GraphWindow>& g) { return g->eager && g->w.base == buf; };
      if (std::any_of(wins.begin(), wins.end(), same_base)) {
        if (!st.wait_last_launch())  // our last launch may still write through its mappings
          throw TimeoutError(
              common::format("graph registration (rank {}): the last collective did not finish within {} ms", st.rank(),
                             svc.options().timeout.count()));
        wins.erase(std::remove_if(wins.begin(), wins.end(), same_base), wins.end());
      }
    }
    Window w = register_range(st, const_cast<void*>(buf), bytes, "graph registration");
    if (!w.zero_copy) return nullptr;  // logged by register_range; nothing to keep
    auto g = std::make_unique<GraphWindow>();
    g->w = std::move(w);
    g->alloc_id = alloc;
    g->eager = stream == nullptr;
    hit = g.get();
    wins.push_back(std::move(g));
  }
  if (stream) hold(*hit, stream);
  return &hit->w;
}

}  // namespace peerlink::coll
