// Services the stream-ordered engine (stream_p2p.h) needs from the transport: the mapping of a
// peer's published buffer at an exact version (sender; waiting for it, or not: the NCCL form's
// zero-copy binds), and the length this rank published under a buffer id (receiver). Kept in their
// own file so the stream engine touches no transport internals.
#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "transport/comm_impl.h"
#include "transport/registry.h"
#include "transport/transport.h"

namespace peerlink::detail {

Binding Transport::bind_published(int peer, uint32_t buf_id, uint64_t version, size_t offset, size_t len,
                                  const char* what) {
  rethrow_worker_error();
  check_peer(peer);
  if (version == 0)
    throw InvalidArgument(common::format("{} to rank {}: version must be > 0 (buffer {})", what, peer, buf_id));
  if (offset > SIZE_MAX - len)
    throw InvalidArgument(common::format("{} to rank {}: offset {} + len {} overflows", what, peer, offset, len));
  Publication pub = wait_publication(peer, buf_id, version, what);
  if (pub.version > version)
    throw InvalidArgument(
        common::format("{} to rank {}: stale version {} for buffer {}; the receiver published version {}", what, peer,
                       version, buf_id, pub.version));
  if (offset + len > pub.len)
    throw InvalidArgument(
        common::format("{} to rank {}: [offset {}, +len {}) exceeds buffer {} of {} bytes (version {})", what, peer,
                       offset, len, buf_id, pub.len, version));
  return ipc_->bind(peer, pub);
}

std::optional<Binding> Transport::try_bind_published(int peer, uint32_t buf_id, uint64_t version, const char* what) {
  rethrow_worker_error();
  check_peer(peer);
  std::optional<Publication> pub = registry_read(peers_[peer]->env.out.reg, buf_id);
  if (!pub) return std::nullopt;
  if (pub->revoked)
    throw InvalidArgument(common::format("{} to rank {}: buffer {} was freed by rank {}", what, peer, buf_id, peer));
  if (pub->version != version)
    throw InvalidArgument(common::format("{} to rank {}: buffer {} is at version {}, expected {}", what, peer, buf_id,
                                         pub->version, version));
  return ipc_->bind(peer, *pub);
}

uint64_t Transport::published_len(int peer, uint32_t buf_id, char** ptr) {
  Peer& P = *peers_[peer];
  std::lock_guard<std::mutex> g(P.pubs.mu);
  auto it = P.pubs.by_id.find(buf_id);
  // A revoked publication (its memory was freed) is no destination: as if never published.
  if (it == P.pubs.by_id.end() || it->second.revoked) return 0;
  if (ptr) *ptr = it->second.ptr;
  return it->second.len;
}

void* CommImpl::map_published(int peer, uint32_t buf_id, uint64_t version, size_t offset, size_t len,
                              const char* what, std::shared_ptr<void>* hold, bool* in_process) {
  validate_peer(peer, what);
  check_open(what);
  Binding b = transport_->bind_published(peer, buf_id, version, offset, len, what);
  *hold = b.map;  // keeps the mapping open while an operation uses it
  if (in_process) *in_process = b.map && b.map->in_process();
  return b.ptr + offset;
}

void* CommImpl::try_map_published(int peer, uint32_t buf_id, uint64_t version, size_t* len,
                                  std::shared_ptr<void>* hold) {
  validate_peer(peer, "zero-copy bind");
  check_open("zero-copy bind");
  std::optional<Binding> b = transport_->try_bind_published(peer, buf_id, version, "zero-copy bind");
  if (!b) return nullptr;
  *hold = b->map;
  *len = b->len;
  return b->ptr;
}

uint64_t CommImpl::local_published_len(int peer, uint32_t buf_id, char** ptr) {
  validate_peer(peer, "recv");
  check_open("recv");
  return transport_->published_len(peer, buf_id, ptr);
}

}  // namespace peerlink::detail
