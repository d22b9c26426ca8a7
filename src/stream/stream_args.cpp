// Stream engine: what a stream-ordered call can check on this rank alone, before any setup that
// needs the peer (binding its area waits for the peer's first stream call). A bad argument is
// InvalidArgument at once, naming the offending values, with nothing queued or written; it never
// waits out the timeout in a setup it was always going to fail. What only the peer's publication
// decides (a published-form send's length, offset and version) is checked as soon as the
// publication is known: send_pub maps the destination before it binds the peer's area.
#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "stream/stream_p2p.h"
#include "transport/services.h"

namespace peerlink::detail {

using namespace peerlink::stream;

void StreamEngine::check_peer_usable(int peer, const char* what) {
  if (peer < 0 || peer >= state_.world)
    throw InvalidArgument(common::format("{}: peer {} is outside [0, {})", what, peer, state_.world));
  if (peer == state_.rank) throw InvalidArgument(common::format("{}: peer {} is this rank itself", what, peer));
  runner_->check_peer_path(peer, what);  // known from setup, so said before anything waits for the peer
}

void StreamEngine::check_send_pub(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset,
                                  uint64_t version) {
  check_peer_usable(peer, "send");
  if (!src && len > 0) throw InvalidArgument(common::format("send to rank {}: src is null (len {})", peer, len));
  runner_->check_buffer(src, len, "send to rank ", peer);
  if (buf_id >= kReservedBufBase)
    throw InvalidArgument(common::format("send to rank {}: buffer id {} is reserved (ids >= {} belong to the library)",
                                         peer, buf_id, kReservedBufBase));
  if (version == 0)
    throw InvalidArgument(
        common::format("send to rank {}: version must be > 0 for the published-buffer form (buffer {}); use send(peer, "
                       "src, len, stream) for unpublished buffers",
                       peer, buf_id));
  if (offset > SIZE_MAX - len)
    throw InvalidArgument(common::format("send to rank {}: offset {} + len {} overflows", peer, offset, len));
}

char* StreamEngine::check_recv_pub(int peer, uint32_t buf_id, size_t offset, size_t len) {
  check_peer_usable(peer, "recv");
  if (buf_id >= kReservedBufBase)
    throw InvalidArgument(
        common::format("recv from rank {}: buffer id {} is reserved (ids >= {} belong to the library)", peer, buf_id,
                       kReservedBufBase));
  if (offset > SIZE_MAX - len)
    throw InvalidArgument(common::format("recv from rank {}: offset {} + len {} overflows", peer, offset, len));
  char* pub_ptr = nullptr;
  uint64_t pub_len = state_.comm.local_published_len(peer, buf_id, &pub_ptr);
  if (pub_len == 0)
    throw InvalidArgument(
        common::format("recv from rank {}: unknown buffer id {} (publish it to that peer with notify_ipc_buffer first)",
                       peer, buf_id));
  if (offset + len > pub_len)
    throw InvalidArgument(common::format("recv from rank {}: [offset {}, +len {}) exceeds buffer {} of {} bytes", peer,
                                         offset, len, buf_id, pub_len));
  return pub_ptr;
}

// NCCL form; peer == this rank is a self send/recv, matched inside a group (queue_self).
void StreamEngine::check_raw(int peer, const void* buf, size_t len, bool send) {
  const bool self = peer == state_.rank;
  if (!self) check_peer_usable(peer, send ? "send" : "recv");
  if (!buf && len > 0)
    throw InvalidArgument(common::format("{}{}{}{} is null (len {})", send ? "send to rank " : "recv from rank ", peer,
                                         self ? " (itself)" : "", send ? ": src" : ": dst", len));
  runner_->check_buffer(buf, len, send ? "send to rank " : "recv from rank ", peer);
}

}  // namespace peerlink::detail
