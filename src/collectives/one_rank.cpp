// One-rank collectives as copies (one_rank.h).
#include "collectives/one_rank.h"

#include <cstring>

#include "gpu/owners.h"
#include "gpu/runtime.h"
#include "transport/services.h"

namespace peerlink::coll {

void one_rank_copy(detail::CommServices& svc, void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0 || dst == src) return;
  if (svc.backend().is_host()) {
    std::memcpy(dst, src, bytes);  // the host backend's collectives return complete
    return;
  }
  gpu::DeviceGuard dg(svc.device());
  gpu::memcpy_async(dst, src, bytes, stream);
}

void one_rank_collective(detail::CommServices& svc, const CollDesc& d, const void* src, void* dst, void* stream) {
  const Piece p = recv_piece(d, d.rank);
  if (p.count == 0) return;
  one_rank_copy(svc, static_cast<char*>(dst) + p.dst_off * d.elem, static_cast<const char*>(src) + p.src_off * d.elem,
                p.count * d.elem, stream);
}

}  // namespace peerlink::coll
