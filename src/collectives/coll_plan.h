// Data movement plan shared by the host implementations (host_collectives.cpp) and the device
// kernels (coll_kernels.cu) of all-gather, reduce-scatter, broadcast, reduce and all-to-all(v), so
// that CI (host backend) runs exactly the piece/chunk arithmetic the GPUs run.
//
// Every collective is described as "pieces": the elements rank `from` sends to rank `to`. All of
// them move the same way through the registered scratch of layout.h:
//   step k (one sequence number): every rank pushes chunk k of each of its outgoing pieces into the
//   receiver's input region position [sender] of slot (seq & 1), publishes its flag, waits for every
//   peer's flag, then consumes chunk k of each incoming piece from its own scratch: a copy to the
//   output (gather-like kinds) or a reduction in rank order into the output (reducing kinds).
// Every rank signals and waits for every peer at every step, also in the rooted collectives, so the
// two-slot argument of layout.h holds unchanged (and calls of any kind, allreduce included, can
// follow each other on one communicator: they share the sequence counters).
//
// The LL variant (GPU small messages, and the host backend to keep it tested) has one step: pieces
// travel as LL lines in the receiver's LL area position [sender]; an empty piece still sends one
// flag-only "token" line, so every ordered pair exchanges something in every call: that is what
// lets a rank reuse a slot two calls later (the peer's line of the previous call proves the peer
// finished the call before it).
#pragma once
#include <cstddef>
#include <cstdint>

#include "collectives/host_device.h"
#include "collectives/layout.h"

namespace peerlink::coll {

enum CollKind : int { kAllGather = 0, kReduceScatter = 1, kBroadcast = 2, kReduce = 3, kAllToAll = 4, kAllToAllV = 5 };

struct CollDesc {
  int kind = kAllGather;
  int rank = 0;
  int world = 0;
  int root = 0;      // broadcast, reduce
  size_t elem = 1;   // bytes per element
  // all_gather: elements per rank; reduce_scatter: recvcount; broadcast/reduce: count;
  // all_to_all: count per peer. Unused by all_to_all_v.
  size_t count = 0;
  // all_to_all_v, in elements (the caller's arrays copied: kernels get them by value).
  size_t send_counts[kMaxRanks] = {};
  size_t send_displs[kMaxRanks] = {};
  size_t recv_counts[kMaxRanks] = {};
  size_t recv_displs[kMaxRanks] = {};
};

// Elements of a piece: where they start in the sender's input, where they go in the receiver's
// output, and how many.
struct Piece {
  size_t src_off = 0;
  size_t dst_off = 0;
  size_t count = 0;
};

PL_HD bool reducing(int kind) { return kind == kReduceScatter || kind == kReduce; }

// What this rank (d.rank) sends to `to` (to == d.rank: its own piece, copied or reduced locally).
// `kind` is d.kind; a kernel specialized for one kind passes it as a constant.
PL_HD Piece send_piece(const CollDesc& d, int to, int kind) {
  Piece p;
  switch (kind) {
    case kAllGather: p.count = d.count; break;
    case kReduceScatter: p.src_off = size_t(to) * d.count; p.count = d.count; break;
    case kBroadcast: p.count = d.rank == d.root ? d.count : 0; break;
    case kReduce: p.count = to == d.root ? d.count : 0; break;
    case kAllToAll: p.src_off = size_t(to) * d.count; p.count = d.count; break;
    case kAllToAllV: p.src_off = d.send_displs[to]; p.count = d.send_counts[to]; break;
  }
  return p;
}

// What this rank receives from `from` (its src_off is only meaningful for from == d.rank).
PL_HD Piece recv_piece(const CollDesc& d, int from, int kind) {
  Piece p;
  switch (kind) {
    case kAllGather: p.dst_off = size_t(from) * d.count; p.count = d.count; break;
    case kReduceScatter: p.src_off = size_t(d.rank) * d.count; p.count = d.count; break;
    case kBroadcast: p.count = from == d.root ? d.count : 0; break;
    case kReduce: p.count = d.rank == d.root ? d.count : 0; break;
    case kAllToAll: p.src_off = size_t(d.rank) * d.count; p.dst_off = size_t(from) * d.count; p.count = d.count; break;
    case kAllToAllV:
      p.src_off = d.send_displs[d.rank];
      p.dst_off = d.recv_displs[from];
      p.count = d.recv_counts[from];
      break;
  }
  return p;
}

PL_HD Piece send_piece(const CollDesc& d, int to) { return send_piece(d, to, d.kind); }
PL_HD Piece recv_piece(const CollDesc& d, int from) { return recv_piece(d, from, d.kind); }

// The largest piece this rank takes part in (sending or receiving). Every rank computes the same
// value for the fixed-size kinds; all_to_all_v ranks agree on the maximum first (header step).
PL_HD size_t local_max_piece(const CollDesc& d) {
  size_t m = 0;
  for (int r = 0; r < d.world; ++r) {
    size_t a = send_piece(d, r).count, b = recv_piece(d, r).count;
    if (a > m) m = a;
    if (b > m) m = b;
  }
  return m;
}

// The moving kinds' (all_gather, broadcast, all_to_all) piece from `from`, as the one-step (LL and
// LL128) kernels consume it: bytes of the piece, where it goes, and for from == d.rank where our own
// copy comes from (`in`; null otherwise). token: an empty piece from a peer (only its token line);
// skip: our own piece already in place (in == out), or empty.
struct MoveTarget {
  const char* in = nullptr;
  char* out = nullptr;
  size_t bytes = 0;
  bool token = false, skip = false;
  bool aligned8 = false;  // out (and in, when there is one) 8-byte aligned
};
PL_HD MoveTarget move_target(const CollDesc& d, int from, int kind, const char* src, char* dst) {
  const Piece rp = recv_piece(d, from, kind);
  MoveTarget t;
  t.bytes = rp.count * d.elem;
  t.out = dst + rp.dst_off * d.elem;
  if (from == d.rank) t.in = src + send_piece(d, from, kind).src_off * d.elem;
  t.token = from != d.rank && t.bytes == 0;
  t.skip = from == d.rank && (t.in == t.out || t.bytes == 0);
  t.aligned8 = ((reinterpret_cast<uintptr_t>(t.out) | reinterpret_cast<uintptr_t>(t.in)) & 7) == 0;
  return t;
}

// Elements of one step per piece: the scratch position (`cap` bytes) rounded down to whole 16-byte
// units, so every chunk starts 16-byte aligned in the scratch.
PL_HD size_t chunk_elems(size_t cap, size_t elem) {
  size_t vec = 16 / elem;
  return cap / elem / vec * vec;
}

// [lo, lo+m) of a piece of `count` elements that step `step` (chunks of `chunk`) and block sub-range
// [rel, rel + per_block) of that chunk cover.
PL_HD size_t sub_range(size_t count, size_t step, size_t chunk, size_t rel, size_t per_block, size_t* lo) {
  size_t c0 = step * chunk;
  if (c0 >= count) return 0;
  size_t clen = count - c0 < chunk ? count - c0 : chunk;
  if (rel >= clen) return 0;
  *lo = c0 + rel;
  return clen - rel < per_block ? clen - rel : per_block;
}

// ---- Two-hop plan of the rooted kinds (CollAlgo::TwoHop: broadcast, reduce) ------------------
// The plain push sends the whole buffer between the root and every peer, so the root's link carries
// it world - 1 times (4x H200: reduce 128 MB 1098 us against NCCL's 387). Two hops
// instead: the count is cut into world - 1 shards, shard i owned by non-root rank owner_rank(i).
// Step k (k = 0 .. chunks of a shard; one step more than the push path) sends two things at once:
//   first hop, chunk k:       reduce: every rank (the root too) pushes chunk k of shard i to its
//                             owner; broadcast: the root does. Nothing goes to the root here.
//   second hop, chunk k - 1:  the owner takes chunk k - 1 of its shard from its previous slot,
//                             reduce: reduces it (rank order) into the root's slot k, position
//                             [owner]; broadcast: copies it to its recvbuf and into every other
//                             non-root's slot k, position [owner].
// then the step's flags, then each receiver of the second hop copies chunk k - 1 of the shards out
// of slot k into its recvbuf (reduce: the root; broadcast: the non-roots). So the root's link sends
// (broadcast) or receives (reduce) the buffer once, and both hops share the step: the links carry
// them at the same time. Safe by layout.h's two-slot argument: every store goes into a peer's slot
// k after its step k - 1 flag, as a push does; the previous slot is read before this rank's step-k
// flag, and peers overwrite it only at step k + 1, after that flag. Position [r] of a slot is
// written by rank r alone (the root is no owner, so nobody pushes to it in the first hop).
PL_HD bool rooted(int kind) { return kind == kBroadcast || kind == kReduce; }
// Rank of shard i's owner (i < world - 1), and the shard a non-root rank owns.
PL_HD int owner_rank(const CollDesc& d, int i) { return i < d.root ? i : i + 1; }
PL_HD int owned_shard(const CollDesc& d, int r) { return r < d.root ? r : r - 1; }
// Elements of every shard but the last ones (a multiple of 16 bytes, so chunks stay aligned).
PL_HD size_t two_hop_shard(const CollDesc& d) {
  const size_t vec = 16 / d.elem, owners = d.world > 1 ? size_t(d.world - 1) : 1;
  const size_t per = (d.count + owners - 1) / owners;
  return (per + vec - 1) / vec * vec;
}
// Shard i: its first element (*off) and its count (0 past the end).
PL_HD size_t shard_range(const CollDesc& d, int i, size_t shard, size_t* off) {
  *off = size_t(i) * shard;
  if (*off >= d.count) return 0;
  return d.count - *off < shard ? d.count - *off : shard;
}

// Grid of the push path: block b moves [b*per_block, +per_block) of every chunk and exchanges flags
// with block b of the peers, so every rank must compute the same grid: from the chunk (same scratch,
// same dtype) and, except for all_to_all_v, from the piece size every rank shares. all_to_all_v
// (sizes differ per rank) uses a fixed grid over the whole chunk and agrees on `steps` in a header
// step (8 bytes of scratch per block). The host backend runs the same split with up to 4 "blocks"
// in one thread, so CI covers the sub-range arithmetic.
struct PushGrid {
  size_t chunk = 0, steps = 0, per_block = 0;  // steps 0 for all_to_all_v (agreed at run time)
  int blocks = 1;
};
// two_hop: the grid of the two-hop plan (pieces: shards; one more step).
inline PushGrid push_grid(const CollDesc& d, size_t cap, int threads, int max_blocks, int blocks_override,
                          bool two_hop = false) {
  PushGrid g;
  const size_t vec = 16 / d.elem, maxp = two_hop ? two_hop_shard(d) : local_max_piece(d);
  g.chunk = chunk_elems(cap, d.elem);
  auto clamp = [&](size_t want) { return int(want < 1 ? 1 : want > size_t(max_blocks) ? size_t(max_blocks) : want); };
  size_t span = g.chunk;
  if (d.kind == kAllToAllV) {
    g.blocks = clamp(cap / 8 < 32 ? cap / 8 : 32);
  } else {
    g.steps = (maxp + g.chunk - 1) / g.chunk + (two_hop ? 1 : 0);
    span = maxp < g.chunk ? maxp : g.chunk;
    // ~4 16-byte units per thread and peer per step: latency-sized grids for medium messages, the
    // whole GPU from ~4 MB per piece (UNMEASURED).
    g.blocks = clamp((span * d.elem + size_t(threads) * 64 - 1) / (size_t(threads) * 64));
  }
  if (blocks_override > 0) g.blocks = blocks_override;
  g.per_block = (span + g.blocks - 1) / g.blocks;
  g.per_block = (g.per_block + vec - 1) / vec * vec;
  if (g.per_block == 0) g.per_block = vec;
  return g;
}

}  // namespace peerlink::coll
