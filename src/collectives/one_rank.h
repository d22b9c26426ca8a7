// Communicators of one rank: every collective there is the identity on the rank's own input, so a
// call is one copy of its piece from sendbuf to recvbuf, and nothing in place, as NCCL does for
// nranks 1. The kernel paths cost more there. One H200, nccl-tests -g 1 -G 100, us, peerlink's
// kernels / NCCL: all_reduce 8 B 1.45 / 0.95, 128 MB 81.6 / 64.3, in place
// 81.4 / 0.02; all_gather, reduce_scatter, broadcast, reduce, alltoall 128 MB 95 / 64.3.
#pragma once
#include <cstddef>

#include "collectives/coll_plan.h"

namespace peerlink::detail {
class CommServices;
}

namespace peerlink::coll {

// Copies `bytes` from src to dst: on a GPU enqueued on `stream` (cudaMemcpyAsync, a memcpy node
// when captured), on the host backend at once. Nothing when bytes is 0 or src == dst.
void one_rank_copy(detail::CommServices& svc, void* dst, const void* src, size_t bytes, void* stream);

// The collective `d` (rank 0 of world 1, arguments checked): copies its one piece (recv_piece).
void one_rank_collective(detail::CommServices& svc, const CollDesc& d, const void* src, void* dst, void* stream);

}  // namespace peerlink::coll
