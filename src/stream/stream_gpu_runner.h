// GPU runner of the stream engine (stream_runner.h): one StreamLaunch per stream of a batch, enqueued
// with no host synchronization and nothing allocated or copied at enqueue, so the launch can be
// captured in a graph. Its state is what only GPUs have: the host-mapped error word the kernels
// write, the grid budget, the copy-engine lanes, NCCL-form zero-copy between processes, and the
// peer mappings that launches still in flight write.
// Files: stream_gpu.cpp (setup, checks, device errors, in-flight launches), stream_gpu_launch.cpp
// (building the launches, their grids, enqueuing them), stream_ce.cpp (the copy-engine path),
// stream_zc.h (zero-copy between processes), stream_kernels.cu (device side).
#pragma once
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "gpu/owners.h"
#include "stream/stream_runner.h"

namespace peerlink::stream {
struct StreamLaunch;
}

namespace peerlink::detail {

class StreamZeroCopy;

class GpuStreamRunner final : public StreamRunner {
 public:
  explicit GpuStreamRunner(StreamState& st);
  ~GpuStreamRunner() override;
  GpuStreamRunner(const GpuStreamRunner&) = delete;
  GpuStreamRunner& operator=(const GpuStreamRunner&) = delete;

  void init_area(const stream::AreaHeader& h) override;
  void peer_bound(int q, void* base, bool in_process) override;
  void check_peer_path(int peer, const char* what) const override;
  void check_buffer(const void* p, size_t len, const char* what, int peer) const override;
  // The kernels would notice a lost peer only at the timeout.
  bool recv_needs_live_peer() const override { return true; }
  void prepare_raw(StreamOp& op) override;
  void add_self_copy(std::vector<StreamOp>& ops, const StreamOp& send, const StreamOp& recv) override;
  void run(std::vector<StreamOp>& ops) override;  // stream_gpu_launch.cpp: one launch per stream
  void check_device_error() override;
  void rethrow_async_error() const override;
  void close() noexcept override;
  int zero_copy_slots_seen(int peer) const override;

 private:
  // Building and enqueuing the launches (stream_gpu_launch.cpp); GpuLaunch: one stream's share of a batch.
  struct GpuLaunch;
  void plan_launch(const std::vector<StreamOp>& ops, void* stream, GpuLaunch& b) const;
  void add_channels(stream::StreamLaunch& L, const std::vector<const StreamOp*>& mine,
                    std::vector<std::shared_ptr<void>>& holds) const;
  int fill_zero_copy(std::vector<GpuLaunch>& batch, bool capturing) const;
  void enqueue_launch(GpuLaunch& b, bool binds);
  std::exception_ptr device_error(uint32_t word) const;  // the error a word names
  void reap_inflight(bool wait_all);
  void assign_blocks(stream::StreamLaunch& L) const;  // grid of one launch
  int channel_blocks_wanted(const stream::StreamLaunch& L, int c) const;  // before the grid budget
  bool ce_eligible(const std::vector<const StreamOp*>& ops) const;  // stream_ce.cpp
  void launch_ce(const stream::StreamLaunch& L, void* stream);      // stream_ce.cpp

  StreamState& st_;
  uint32_t* error_ = nullptr;  // host-mapped error word the kernels write (stream_launch.h)
  int grid_cap_ = 1;           // most blocks of one launch: the device's multiprocessor count
  int channel_blocks_ = 1;     // most blocks of one channel (Options::stream_blocks or kMaxChannelBlocks)
  bool pdl_ = false;           // launch with programmatic dependent launch (Options::stream_pdl)
  size_t ce_min_ = 0;          // Options::stream_ce_min (0: no copy-engine path)
  // Ranks of this process on this rank's GPU (this one included): their launches must all be
  // resident at once (a process does not time-slice its own kernels), so each gets a share of the
  // multiprocessors (assign_blocks).
  int gpu_sharers_ = 1;
  std::unique_ptr<StreamZeroCopy> zc_;  // NCCL-form zero-copy between processes (stream_direct_ipc_min > 0)
  std::vector<gpu::StreamOwner> ce_lanes_;  // side streams of the copy-engine path (lanes - 1)
  std::vector<gpu::EventOwner> ce_events_;  // [0] fork, [1 + l] join of side lane l
  struct Inflight {
    void* event = nullptr;  // recorded after the launch (eager launches only)
    std::vector<std::shared_ptr<void>> holds;
  };
  std::vector<Inflight> inflight_;
  std::vector<void*> free_events_;
  std::vector<std::shared_ptr<void>> graph_holds_;  // mappings a captured launch writes: kept for good
};

}  // namespace peerlink::detail
