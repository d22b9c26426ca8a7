#include "device_comm.h"

#include "errors.h"
#include "peerlink/device.h"

namespace peerlink::pt {

const c10::impl::VirtualGuardImpl& cuda_impl() {
  static const c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  return impl;
}

DeviceComm::DeviceComm(std::unique_ptr<GroupComm> comm, c10::Device device)
    : comm_(std::move(comm)), device_(device) {
  if (!is_host()) {
    internal_ = cuda_impl().getStreamFromGlobalPool(device_, /*isHighPriority=*/false);
    fork_ = std::make_unique<c10::Event>(c10::DeviceType::CUDA);
    join_ = std::make_unique<c10::Event>(c10::DeviceType::CUDA);
    capture_join_ = std::make_unique<c10::Event>(c10::DeviceType::CUDA);
  }
}

DeviceComm::~DeviceComm() {
  try {
    close(/*drain=*/true);
  } catch (const std::exception&) {  // the communicator's destructor still releases everything
  }
}

Launch DeviceComm::begin(bool async) {
  Launch l;
  l.dc = this;
  l.async = async;
  if (is_host()) return l;
  c10::Stream current = cuda_impl().getStream(device_);
  c10::Stream s = async ? *internal_ : current;
  if (async) {  // the internal stream starts where the caller's stream is now
    fork_->record(current);
    fork_->block(s);
  }
  l.stream = s;
  l.raw = s.native_handle();
  l.capturing = device::is_capturing(l.raw);
  if (last_ && *last_ != s) order_after_last(s, l.capturing, async && *last_ == current);
  return l;
}

void DeviceComm::order_after_last(const c10::Stream& s, bool capturing, bool forked_after_last) {
  const bool last_capturing = device::is_capturing(last_->native_handle());
  if (capturing) {
    // The event recorded after the previous launch of this capture (end()): the previous stream
    // still captures, so it is the same capture.
    if (last_in_capture_ && last_capturing) capture_join_->block(s);
    return;
  }
  // A captured launch runs at each replay, not now; the fork already follows the previous stream.
  if (last_in_capture_ || last_capturing || forked_after_last) return;
  // Recorded now, the event follows the previous launch and whatever was queued on its stream
  // since; that work cannot wait for anything this stream will run later, so this adds no cycle.
  join_->record(*last_);
  join_->block(s);
}

void DeviceComm::end(const Launch& l) {
  if (!l.stream) return;
  if (l.capturing) capture_join_->record(*l.stream);
  last_in_capture_ = l.capturing;
  last_ = l.stream;
}

void DeviceComm::check_errors(const char* what) {
  translate_errors(what, [&] {
    comm_->check_errors(coll_used_, p2p_used_);
  });
}

void DeviceComm::synchronize_streams() {
  if (is_host()) return;
  cuda_impl().synchronizeStream(cuda_impl().getStream(device_));
  cuda_impl().synchronizeStream(*internal_);
}

void DeviceComm::close(bool drain) {
  if (closed_) return;
  closed_ = true;
  // Not while the stream is being captured (a synchronization would invalidate the capture).
  if (drain && !is_host() && !device::is_capturing(cuda_impl().getStream(device_).native_handle())) {
    try {
      synchronize_streams();
    } catch (const std::exception&) {  // a failed device (or one torch already tore down): close anyway
    }
  }
  comm_->close();
}

}  // namespace peerlink::pt
