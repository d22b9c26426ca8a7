// Per-communicator state of the collectives: the registered (exported, peer-mapped) flag and data
// buffers, the tuning every rank agreed at setup, sequence counters, the error word and stream
// ordering. The communicator's UpperState (transport/services.h): created on the first collective
// (collectively: every rank's first collective sets it up) and destroyed before the transport
// closes.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "collectives/graph_windows.h"
#include "collectives/layout.h"
#include "collectives/setup_record.h"
#include "collectives/window_table.h"
#include "gpu/backend.h"
#include "gpu/owners.h"
#include "gpu/runtime.h"
#include "transport/services.h"

namespace peerlink {
class Communicator;
}  // namespace peerlink

namespace peerlink::coll {

constexpr int kCeMaxLanes = 4;  // Options::coll_ce_lanes bound
constexpr int kCeEvents = 3 + kCeMaxLanes;

class CollState final : public detail::UpperState {
 public:
  // Sets the communicator's state up (collective: every rank calls it on its first collective).
  static std::shared_ptr<CollState> create(detail::CommServices& svc);
  ~CollState() override;
  CollState(const CollState&) = delete;
  CollState& operator=(const CollState&) = delete;

  // ---- fixed at setup (every rank agreed where it matters): read without the call lock.
  detail::CommServices& svc() const { return *svc_; }  // the transport's services
  int rank() const { return rank_; }
  int world() const { return world_; }
  bool host() const { return host_; }
  int device() const { return device_; }
  const DataLayout& layout() const { return layout_; }
  FlagArea* flags(int r) const { return flags_[r]; }  // rank r's flag area, mapped here ([rank()]: ours)
  char* data(int r) const { return data_[r]; }        // rank r's scratch, mapped here
  // Tuning from the communicator's Options, fixed when the state is created.
  int threads() const { return threads_; }                  // Options::allreduce_threads; 0 = per algorithm
  int blocks_override() const { return blocks_override_; }  // Options::allreduce_blocks
  // The grid, agreed by every rank at setup (setup_record.h grid_agreement): the smallest
  // multiprocessor count of the ranks' GPUs, and the most blocks of any collective kernel
  // (Options::max_blocks; the GPU's share where ranks of one process share it; else kMaxBlocks).
  int sm_count() const { return sm_count_; }
  int grid_cap() const { return grid_cap_; }
  size_t ll_max() const { return ll_max_; }        // GPU: one-shot messages up to this many bytes use LL lines
  size_t ll128_max() const { return ll128_max_; }  // then up to this many LL128 lines (0: none, see setup)
  bool nvlink_all() const { return nvlink_all_; }  // GPU: every peer over NVLink (or on this GPU)
  bool pdl() const { return pdl_; }                // programmatic dependent launch (Options::allreduce_pdl)
  bool generic_oneshot() const { return generic_oneshot_; }  // test switch: the generic one-shot loop
  // GPU: mapped pinned host word written by kernels (the error code of a failed wait).
  uint32_t* error_word() const { return error_; }
  // Copy-engine path of the moving collectives (coll_ce.cpp), created with the state so that a
  // first call inside a graph capture creates nothing: stream [0] takes the receivers'
  // scratch-to-output copies, [1, ce_lanes()) the extra push lanes. Events: kCe* in coll_ce.cpp.
  int ce_lanes() const { return ce_lanes_; }  // Options::coll_ce_lanes
  gpu::Stream ce_stream(int lane) const { return ce_streams_[lane].get(); }
  gpu::Event ce_event(int i) const { return ce_events_[i].get(); }

  // ---- per call: one collective at a time per communicator (launch order = sequence order).
  // Everything below needs the lock that lock_calls() returns.
  std::unique_lock<std::mutex> lock_calls() { return std::unique_lock<std::mutex>(mu_); }
  uint64_t next_host_step() { return ++host_seq_; }  // host backend: the sequence number of this step
  // Registered windows (windows.cpp; peerlink/windows.h) and those of captured collectives'
  // unregistered buffers (graph_windows.h).
  WindowTable& windows() { return windows_; }
  GraphWindowTable& graph_windows() { return graph_windows_; }
  const GraphWindowTable& graph_windows() const { return graph_windows_; }
  // A call failed mid-protocol: the ranks disagree now, and every later call rethrows `e`.
  void set_broken(std::exception_ptr e) { broken_ = std::move(e); }
  // set_broken from the exception in flight (call inside a catch block, then rethrow it): a
  // timeout or a lost peer as it is, anything else (an interruption hook abandoned a wait) as
  // "abandoned mid-protocol"; `what` names the call.
  void set_broken_by_current_exception(const char* what);
  void rethrow_if_broken() const {
    if (broken_) std::rethrow_exception(broken_);
  }
  // Calls on different streams must not overlap on the device (they share counters and scratch):
  // the order event is recorded after every launch outside graph capture, and a call on another
  // stream first waits for it. Inside a capture the order of captured work is the graph's (events
  // cannot cross the capture boundary), so nothing is recorded or waited for there.
  template <typename Launch>
  void launch_in_order(void* stream, Launch&& launch) {
    const bool capturing = gpu::stream_is_capturing(stream);
    if (!capturing && event_valid_ && stream != last_stream_) gpu::stream_wait_event(stream, order_event_);
    launch();
    if (!capturing) {
      gpu::event_record(order_event_, stream);
      event_valid_ = true;
    }
    last_stream_ = stream;
  }
  // Waits (bounded by Options::timeout, polling every 50 us) until the last collective this rank
  // launched finished on the device; false when the bound ran out. True at once on the host
  // backend or before any launch.
  bool wait_last_launch() const;

 private:
  explicit CollState(detail::CommServices& svc);
  // The setup steps of create(), in order.
  void configure(const Options& opts);
  void allocate_local(const Options& opts);
  SetupRecord local_record(const Options& opts);
  void agree(const SetupRecord* all, const Options& opts);
  void map_peers(const SetupRecord* all);

  detail::CommServices* svc_;
  int rank_ = 0;
  int world_ = 0;
  bool host_ = true;
  int device_ = -1;
  DataLayout layout_;
  FlagArea* flags_[kMaxRanks] = {};  // [rank_] is ours
  char* data_[kMaxRanks] = {};
  gpu::MemHandle flag_handle_[kMaxRanks];  // set exactly when the mapping was acquired
  gpu::MemHandle data_handle_[kMaxRanks];
  int threads_ = 0;
  int blocks_override_ = 0;
  int sm_count_ = 0;
  int grid_cap_ = kMaxBlocks;
  size_t ll_max_ = 0;
  size_t ll128_max_ = 0;
  bool nvlink_all_ = false;
  bool pdl_ = false;
  bool generic_oneshot_ = false;

  std::mutex mu_;
  uint64_t host_seq_ = 0;  // host backend: steps done (the device keeps its own counter)
  uint32_t* error_ = nullptr;  // error_mem_'s
  void* last_stream_ = nullptr;
  bool event_valid_ = false;  // order_event_ was recorded (outside capture) after our last launch
  gpu::Event order_event_ = nullptr;  // event_mem_'s
  std::exception_ptr broken_;

  // GPU resources, owned (released on their device, whatever the thread's current one is); the
  // raw fields above and flags_[rank_] are views of them for the launch code.
  gpu::DeviceAlloc flags_mem_;
  gpu::MappedHostAlloc error_mem_;
  gpu::EventOwner event_mem_;
  int ce_lanes_ = 1;
  gpu::StreamOwner ce_streams_[kCeMaxLanes];
  gpu::EventOwner ce_events_[kCeEvents];
  WindowTable windows_;
  GraphWindowTable graph_windows_;
};

// The most blocks of a kernel meant to cover the whole GPU (one per multiprocessor), within the
// agreed cap.
inline int whole_gpu_blocks(const CollState& st) { return std::max(1, std::min(st.sm_count(), st.grid_cap())); }

// The communicator's state, set up on first use (collective).
CollState& coll_state(Communicator& comm);
// The state if some call already set it up, else null (never collective, never waits for a setup).
std::shared_ptr<CollState> coll_state_if_set(Communicator& comm);

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
// the call lock. Shared by every collective (allreduce.cpp).
void check_collective_error(CollState& st);

// Host backend: runs the allreduce synchronously with CPU copies and SHM flags.
void host_allreduce(CollState& st, const void* src, void* dst, size_t count, int dtype, int op,
                    bool one_shot);

}  // namespace peerlink::coll
