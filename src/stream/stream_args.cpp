// Stream engine: what a stream-ordered call can check on this rank alone, before any setup that
// needs the peer (binding its area waits for the peer's first stream call). A bad argument is
// InvalidArgument at once, naming the offending values, with nothing queued or written; it never
// waits out the timeout in a setup it was always going to fail. What only the peer's publication
// decides (a published-form send's length, offset and version) is checked as soon as the
// publication is known: send_pub maps the destination before it binds the peer's area.
#include "common/log.h"
#include "gpu/runtime.h"
#include "peerlink/errors.h"
#include "stream/stream_p2p.h"
#include "transport/services.h"

namespace peerlink::detail {

using common::cat;
using namespace peerlink::stream;

namespace {
// GPU: the kernels read and write any device-accessible memory of this device.
void check_device_memory(bool host, const void* p, size_t len, const char* what, int peer) {
  if (host || len == 0) return;
  if (!gpu::is_device_pointer(p))
    throw InvalidArgument(cat(what, peer, ": ", p, " is not device memory (", len,
                              " bytes); stream-ordered calls on a GPU communicator take device buffers"));
}
}  // namespace

void StreamEngine::check_peer_usable(int peer, const char* what) {
  if (peer < 0 || peer >= world_)
    throw InvalidArgument(cat(what, ": peer ", peer, " is outside [0, ", world_, ")"));
  if (peer == rank_) throw InvalidArgument(cat(what, ": peer ", peer, " is this rank itself"));
  // The kernels store straight into the peer's memory: a pair without peer access (relay path) has
  // no stream-ordered path yet. Known from setup, so said before anything waits for the peer.
  if (!host_ && comm_.path_to(peer) != Path::Direct)
    throw UnsupportedError(cat("stream-ordered send/recv with rank ", peer, ": the pair uses the ",
                               to_string(comm_.path_to(peer)), " path (", comm_.path_reason(peer),
                               "); only direct pairs are supported"));
}

void StreamEngine::check_send_pub(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset,
                                  uint64_t version) {
  check_peer_usable(peer, "send");
  if (!src && len > 0) throw InvalidArgument(cat("send to rank ", peer, ": src is null (len ", len, ")"));
  check_device_memory(host_, src, len, "send to rank ", peer);
  if (buf_id >= kReservedBufBase)
    throw InvalidArgument(cat("send to rank ", peer, ": buffer id ", buf_id, " is reserved (ids >= ", kReservedBufBase,
                              " belong to the library)"));
  if (version == 0)
    throw InvalidArgument(cat("send to rank ", peer, ": version must be > 0 for the published-buffer form (buffer ",
                              buf_id, "); use send(peer, src, len, stream) for unpublished buffers"));
  if (offset > SIZE_MAX - len)
    throw InvalidArgument(cat("send to rank ", peer, ": offset ", offset, " + len ", len, " overflows"));
}

char* StreamEngine::check_recv_pub(int peer, uint32_t buf_id, size_t offset, size_t len) {
  check_peer_usable(peer, "recv");
  if (buf_id >= kReservedBufBase)
    throw InvalidArgument(cat("recv from rank ", peer, ": buffer id ", buf_id, " is reserved (ids >= ",
                              kReservedBufBase, " belong to the library)"));
  if (offset > SIZE_MAX - len)
    throw InvalidArgument(cat("recv from rank ", peer, ": offset ", offset, " + len ", len, " overflows"));
  char* pub_ptr = nullptr;
  uint64_t pub_len = comm_.local_published_len(peer, buf_id, &pub_ptr);
  if (pub_len == 0)
    throw InvalidArgument(cat("recv from rank ", peer, ": unknown buffer id ", buf_id,
                              " (publish it to that peer with notify_ipc_buffer first)"));
  if (offset + len > pub_len)
    throw InvalidArgument(cat("recv from rank ", peer, ": [offset ", offset, ", +len ", len, ") exceeds buffer ", buf_id,
                              " of ", pub_len, " bytes"));
  return pub_ptr;
}

// NCCL form; peer == rank_ is a self send/recv, matched inside a group (queue_self).
void StreamEngine::check_raw(int peer, const void* buf, size_t len, bool send) {
  const bool self = peer == rank_;
  if (!self) check_peer_usable(peer, send ? "send" : "recv");
  if (!buf && len > 0)
    throw InvalidArgument(cat(send ? "send to rank " : "recv from rank ", peer, self ? " (itself)" : "",
                              send ? ": src" : ": dst", " is null (len ", len, ")"));
  check_device_memory(host_, buf, len, send ? "send to rank " : "recv from rank ", peer);
}

}  // namespace peerlink::detail
