// Windows that captured collectives make for buffers nobody registered (Options::
// coll_graph_register; NCCL's NCCL_GRAPH_REGISTER model). A collective captured into a CUDA graph
// has fixed buffers for the graph's whole life, so the one host exchange of a window registration
// (windows.cpp's register_range) can be paid once, at capture, and every replay writes straight
// into the peers' buffers. Each such window is held by the graphs that captured it (a CUDA user
// object per graph) and released at the first collective after the last of them is destroyed
// (where the runtime has no user objects, HIP, it stays until the communicator closes).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/window_table.h"

namespace peerlink::coll {

struct CollState;

struct GraphWindow {
  Window w;                  // this rank's buffer [base, +bytes) and the peers' ones, mapped here
  uint64_t alloc_id = 0;     // the allocation holding base when registered (a new one at the same
                             // address is another buffer: the window is not reused for it)
  bool eager = false;        // made by an eager call (coll_graph_register 2): no graph holds it
  bool pinned = false;       // captured where graphs cannot hold it (HIP): kept until close()
  uint64_t capture_id = 0;   // the last capture that took a reference
  std::shared_ptr<std::atomic<int>> graphs = std::make_shared<std::atomic<int>>(0);  // holders
};

struct GraphWindowTable {
  std::vector<std::unique_ptr<GraphWindow>> wins;
};

// The window of this call's zero-copy buffer [buf, +bytes) (recvbuf of the moving kinds, sendbuf of
// the reducing ones): one this rank and every peer already hold for exactly that buffer, or a new
// one registered now on every rank; nullptr when some rank cannot export or map its buffer (the
// call then takes the staged paths). `stream` is the capturing stream (its graph takes a reference)
// or nullptr for an eager call. Collective: every rank makes the same call (one allgather, plus a
// registration when any rank lacks the window). Caller holds the call lock (CollState::lock_calls) and has released the unheld
// windows first (release_unheld_graph_windows: every collective does, graph or not).
const Window* graph_window(CollState& st, const void* buf, size_t bytes, void* stream);

// Unmaps the graph windows that no graph holds any more (their launches have completed).
// Caller holds the call lock (CollState::lock_calls).
void release_unheld_graph_windows(CollState& st);

}  // namespace peerlink::coll
