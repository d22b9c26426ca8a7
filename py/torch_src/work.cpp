#include "work.h"

#include <c10/core/StreamGuard.h>

#include <chrono>
#include <thread>

#include "errors.h"
#include "peerlink/device.h"

namespace peerlink::pt {

using Clock = std::chrono::steady_clock;

WorkPeerlink::WorkPeerlink(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
    : Work(rank, type), outputs_(std::move(outputs)) {
  finish();
}

WorkPeerlink::WorkPeerlink(int rank, c10d::OpType type, std::shared_ptr<DeviceComm> dc, const Launch& l,
                           std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep_alive)
    : Work(rank, type),
      dc_(std::move(dc)),
      stream_(l.stream),
      async_(l.async),
      captured_(l.capturing),
      outputs_(std::move(outputs)),
      keep_(std::move(keep_alive)) {
  // A synchronous call's end event is recorded only when something asks for it (most callers only
  // wait() on the same stream, which needs none); a later record on the call's stream is a
  // conservative end. An asynchronous or captured one needs it now.
  if (async_ || captured_) ensure_end_event();
  if (async_) getFuture();
}

WorkPeerlink::~WorkPeerlink() = default;

void WorkPeerlink::ensure_end_event() {
  if (end_) return;
  end_ = std::make_unique<c10::Event>(c10::DeviceType::CUDA);
  end_->record(*stream_);
}

void WorkPeerlink::block_current_stream() {
  c10::Stream current = cuda_impl().getStream(dc_->device());
  if (current == *stream_) return;  // the caller's stream already runs after the call
  ensure_end_event();
  end_->block(current);
}

bool WorkPeerlink::isCompleted() {
  if (!dc_) return true;
  if (captured_) return true;  // it runs at each replay; the capture left nothing pending
  // No event query while the caller's stream is being captured (it would invalidate the capture).
  if (device::is_capturing(cuda_impl().getStream(dc_->device()).native_handle())) return false;
  ensure_end_event();
  return end_->query();
}

bool WorkPeerlink::isSuccess() const { return Work::isSuccess(); }

bool WorkPeerlink::wait(std::chrono::milliseconds timeout) {
  if (!dc_) return Work::wait(timeout);
  try {
    block_current_stream();
    dc_->check_errors("wait");
    const bool bounded = timeout != kNoTimeout && !captured_ &&
                         !device::is_capturing(cuda_impl().getStream(dc_->device()).native_handle());
    if (bounded) {  // the caller asked the host to wait (ProcessGroupNCCL's wait(timeout))
      ensure_end_event();
      const auto deadline = Clock::now() + timeout;
      while (!end_->query()) {
        dc_->check_errors("wait");
        if (Clock::now() > deadline)
          C10_THROW_ERROR(DistBackendError, c10::str("peerlink wait: ", c10d::opTypeToString(opType_),
                                                     " did not complete within ", timeout.count(), " ms"));
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  } catch (...) {
    std::lock_guard<std::mutex> g(mutex_);
    exception_ = std::current_exception();
    throw;
  }
  return true;
}

void WorkPeerlink::synchronize() {
  if (dc_) block_current_stream();
}

std::vector<at::Tensor> WorkPeerlink::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> WorkPeerlink::getFuture() {
  if (future_) return future_;
  auto type = c10::ListType::create(c10::TensorType::get());
  if (!dc_) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(type);
    future_->markCompleted(c10::IValue(outputs_));
    return future_;
  }
  // The future's events are recorded on the current stream of its device: the call's stream here.
  future_ = c10::make_intrusive<c10::ivalue::Future>(type, std::vector<c10::Device>{dc_->device()});
  c10::StreamGuard guard(*stream_);
  future_->markCompleted(c10::IValue(outputs_));
  return future_;
}

void record_on_stream(const std::vector<at::Tensor>& tensors, const c10::Stream& stream) {
  for (const at::Tensor& t : tensors) {
    if (t.defined() && t.is_cuda() && t.has_storage()) cuda_impl().recordDataPtrOnStream(t.storage().data_ptr(), stream);
  }
}

}  // namespace peerlink::pt
