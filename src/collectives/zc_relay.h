// The relay broadcast of the zero-copy path (coll_launch.h, ZcRelayArgs): which calls take it, how
// the buffer is cut into parts and chunks, and each rank's copies. Shared by the host backend and
// the GPU kernel (coll_zero_copy.cpp), so CI runs the same cut.
#pragma once
#include <string>

#include "collectives/coll_launch.h"
#include "collectives/window_table.h"

namespace peerlink::coll {

// Broadcast on 3+ ranks. On 2 there is one non-root: the plain push is already one copy per link.
inline bool relay_kind(const CollDesc& d) { return d.kind == kBroadcast && d.world >= 3; }

// The cut of a broadcast of `bytes` over world - 1 parts: part q is [q * part, +part) clipped to
// `bytes` (the last may be shorter, parts past the end empty), each part in chunks of `chunk`
// bytes. Both multiples of 16 bytes; at most kRelayMaxChunks chunks per part.
struct RelaySplit {
  size_t part = 0, chunk = 0;
};
RelaySplit relay_split(size_t bytes, int world);

// The rank that owns part q, and the part rank r owns (r != root).
inline int relay_owner(int q, int root) { return q < root ? q : q + 1; }
inline int relay_part(int r, int root) { return r < root ? r : r - 1; }

// This rank's copies of a broadcast whose recvbuf `dst` lies in window `w` (src: the root's
// sendbuf). Returns the error, naming the window and the range, when a copy would leave a peer's
// window ("" when none does); nothing is written either way.
std::string relay_plan(const CollDesc& d, const Window& w, const char* src, char* dst, ZcRelayArgs* r);

}  // namespace peerlink::coll
