// Per-communicator allreduce state: the registered (exported, peer-mapped) flag and data buffers,
// sequence counters, error word and stream ordering. Lives in services.upper_state("collectives"), so
// it is created on the first allreduce (collectively: every rank's first allreduce sets it up) and
// destroyed before the transport closes.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>

#include "collectives/graph_windows.h"
#include "collectives/layout.h"
#include "collectives/window_table.h"
#include "gpu/backend.h"
#include "gpu/owners.h"

namespace peerlink {
class Communicator;
namespace detail { class CommServices; }
}  // namespace peerlink

namespace peerlink::coll {

constexpr int kCeMaxLanes = 4;  // Options::coll_ce_lanes bound
constexpr int kCeEvents = 3 + kCeMaxLanes;

struct CollState {
  detail::CommServices* svc = nullptr;  // the transport's services (transport/services.h)
  int rank = 0;
  int world = 0;
  bool host = true;
  DataLayout layout;
  FlagArea* flags[kMaxRanks] = {};  // [rank] is ours
  char* data[kMaxRanks] = {};
  gpu::MemHandle flag_handle[kMaxRanks];
  gpu::MemHandle data_handle[kMaxRanks];

  // Tuning from the communicator's Options (allreduce_*), fixed when the state is created.
  int threads = 0;          // Options::allreduce_threads; 0 = per algorithm (allreduce.cpp)
  int blocks_override = 0;  // Options::allreduce_blocks
  // The grid, agreed by every rank at setup (setup_record.h grid_agreement): the smallest
  // multiprocessor count of the ranks' GPUs, and the most blocks of any collective kernel
  // (Options::max_blocks; the GPU's share where ranks of one process share it; else kMaxBlocks).
  int sm_count = 0;
  int grid_cap = kMaxBlocks;
  size_t ll_max = 0;        // GPU: one-shot messages up to this many bytes go through LL lines
  size_t ll128_max = 0;     // GPU: then up to this many through LL128 lines (0: no LL128, see setup)
  bool nvlink_all = false;  // GPU: every peer of this rank over NVLink (or on its GPU); allreduce's choice
  bool pdl = false;         // Options::allreduce_pdl (default on for compute capability >= 9.0)
  bool generic_oneshot = false;  // Options::allreduce_oneshot_generic: tests keep the generic loop covered

  std::mutex mu;            // one allreduce at a time per communicator (launch order = seq order)
  uint64_t host_seq = 0;    // host backend: steps done (the device keeps its own counter)
  uint32_t* error = nullptr;  // GPU: mapped pinned host word written by kernels (error_mem's)
  void* last_stream = nullptr;
  bool event_valid = false;  // order_event was recorded (outside capture) after our last launch
  gpu::Event order_event = nullptr;  // event_mem's
  std::exception_ptr broken;  // a call failed mid-protocol: ranks disagree now, every call rethrows

  // GPU resources, owned (released on their device, whatever the thread's current one is); the
  // raw fields above and flags[rank] are views of them for the launch code.
  int device = -1;
  gpu::DeviceAlloc flags_mem;
  gpu::MappedHostAlloc error_mem;
  gpu::EventOwner event_mem;
  // Copy-engine path of the moving collectives (coll_ce.cpp), created with the state so that a
  // first call inside a graph capture creates nothing: [0] takes the receivers' scratch-to-output
  // copies, [1..lanes) the extra push lanes. Events: see kCe* in coll_ce.cpp.
  int ce_lanes = 1;  // Options::coll_ce_lanes
  gpu::StreamOwner ce_streams[kCeMaxLanes];
  gpu::EventOwner ce_events[kCeEvents];
  // Registered windows (windows.cpp; peerlink/windows.h): guarded by mu.
  WindowTable windows;
  // Windows of captured collectives' unregistered buffers (graph_windows.h): guarded by mu.
  GraphWindowTable graph_windows;

  ~CollState();
};

// The most blocks of a kernel meant to cover the whole GPU (one per multiprocessor), within the
// agreed cap.
inline int whole_gpu_blocks(const CollState& st) { return std::max(1, std::min(st.sm_count, st.grid_cap)); }

// The communicator's state, set up on first use (collective).
CollState& coll_state(Communicator& comm);
// Waits (bounded by Options::timeout, polling every 50 us) until the last collective this rank
// launched (order_event) finished on the device; false when the bound ran out. True at once on the
// host backend or before any launch.
bool wait_last_launch(const CollState& st);

// The state if some call already set it up, else nullptr (never collective).
CollState* coll_state_if_set(Communicator& comm);

// Maps a peer allocation whose handle passed its record parser and returns its base here; *handle
// is set once mapped (so the caller releases exactly what was acquired). For device IPC the
// mapped range is checked against the handle's size. `what` names the caller in errors.
char* open_peer_checked(detail::CommServices& svc, int peer, const gpu::MemHandle& h, gpu::MemHandle* handle,
                        const char* what);

// The kernel arguments every launch on this state shares: rank, world, layout, the ranks' mapped
// scratch and flags, the error word and the wait bound (Options::timeout).
struct LaunchArgs;
void fill_state_args(const CollState& st, LaunchArgs& a);

// Every peer of this rank is over NVLink or on its GPU (svc.nvlink_to), whatever the runtime.
bool nvlink_to_all(const detail::CommServices& svc, int world);

// Throws the error recorded by an earlier call (broken) or by a kernel (error word): caller holds
// st.mu. Shared by every collective (allreduce.cpp).
void check_collective_error(CollState& st);

// Host backend: runs the allreduce synchronously with CPU copies and SHM flags.
void host_allreduce(CollState& st, const void* src, void* dst, size_t count, int dtype, int op,
                    bool one_shot);

}  // namespace peerlink::coll
