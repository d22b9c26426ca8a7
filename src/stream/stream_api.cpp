// The stream-ordered members of the public Communicator (peerlink/communicator.h): forwarders to the
// communicator's StreamEngine (stream_p2p.h). Defined here, above the transport, so that the
// transport's communicator.cpp includes nothing of the stream layer.
#include "peerlink/communicator.h"
#include "stream/stream_p2p.h"
#include "transport/comm_impl.h"

namespace peerlink {

void Communicator::send(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset, uint64_t version,
                        void* stream) {
  auto call = impl_->begin("send_pub");  // in flight until it returns: close() waits
  detail::stream_engine(*impl_).send_pub(peer, src, len, buf_id, offset, version, stream);
}
void Communicator::recv(int peer, uint32_t buf_id, size_t offset, size_t len, void* stream) {
  auto call = impl_->begin("recv_pub");  // in flight until it returns: close() waits
  detail::stream_engine(*impl_).recv_pub(peer, buf_id, offset, len, stream);
}
void Communicator::send(int peer, const void* src, size_t len, void* stream) {
  auto call = impl_->begin("send_raw");  // in flight until it returns: close() waits
  detail::stream_engine(*impl_).send_raw(peer, src, len, stream);
}
void Communicator::recv(int peer, void* dst, size_t len, void* stream) {
  auto call = impl_->begin("recv_raw");  // in flight until it returns: close() waits
  detail::stream_engine(*impl_).recv_raw(peer, dst, len, stream);
}
void Communicator::group_start() {
  auto call = impl_->begin("group_start");
  detail::stream_engine(*impl_).group_start();
}
void Communicator::group_end() {
  auto call = impl_->begin("group_end");  // in flight until it returns: close() waits
  detail::stream_engine(*impl_).group_end();
}
void Communicator::check_async_error() {
  auto call = impl_->begin("check_async_error");  // close() waits for us
  detail::stream_rethrow_async_error(*impl_);
}

}  // namespace peerlink
