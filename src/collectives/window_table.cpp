// PeerMapping (window_table.h): a peer's range mapped here, released through the transport.
#include "collectives/window_table.h"

#include "common/format.h"
#include "common/log.h"
#include "transport/services.h"

namespace peerlink::coll {

PeerMapping& PeerMapping::operator=(PeerMapping&& o) noexcept {
  if (this != &o) {
    reset();
    svc_ = o.svc_;
    peer_ = o.peer_;
    h_ = o.h_;
    o.svc_ = nullptr;
  }
  return *this;
}

void PeerMapping::reset() noexcept {
  if (!svc_) return;
  try {
    svc_->release_peer_memory(peer_, h_);
  } catch (...) {  // teardown: a failed unmap must not stop the others
  }
  svc_ = nullptr;
}

std::string Window::outside(int peer, size_t at, size_t len, const char* verb) const {
  const size_t have = peer_bytes[peer];
  if (at <= have && len <= have - at) return {};
  return common::format("rank {}'s window {} has {} bytes; this call would {} [{}, +{}) of it", peer, id, have, verb,
                        at, len);
}

}  // namespace peerlink::coll
