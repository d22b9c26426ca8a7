// The c10d Work of a peerlink call.
//
// Host communicators run a call to completion before it returns: its Work is complete. On a CUDA
// device the call is enqueued on a stream (device_comm.h) and the Work follows ProcessGroupNCCL:
// wait() makes the caller's current stream wait for the call (the host never blocks, unless a
// timeout is given, as NCCL's wait(timeout)), then throws what the device recorded for this
// communicator (timeouts, lost peers). An asynchronous call's tensors are recorded on the internal
// stream (the caching allocator does not reuse them before the call ran) and referenced by the
// Work. Inside a graph capture nothing queries or synchronizes an event.
#pragma once
#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <memory>
#include <optional>
#include <vector>

#include "device_comm.h"

namespace peerlink::pt {

class WorkPeerlink : public c10d::Work {
 public:
  // A call that already ran (host backend, or nothing to move).
  WorkPeerlink(int rank, c10d::OpType type, std::vector<at::Tensor> outputs);
  // A call enqueued on l.stream of dc's device.
  WorkPeerlink(int rank, c10d::OpType type, std::shared_ptr<DeviceComm> dc, const Launch& l,
               std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep_alive);
  ~WorkPeerlink() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  void ensure_end_event();
  void block_current_stream();

  std::shared_ptr<DeviceComm> dc_;   // null: complete on return
  std::optional<c10::Stream> stream_;
  bool async_ = false;
  bool captured_ = false;
  std::unique_ptr<c10::Event> end_;  // after the call on stream_ (async: recorded at once; sync: when needed)
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Records the storages of `tensors` as used on `stream` (caching allocator), so that memory freed
// by the caller is not handed out again before the asynchronous call read or wrote it.
void record_on_stream(const std::vector<at::Tensor>& tensors, const c10::Stream& stream);

}  // namespace peerlink::pt
