// Kernel of the two-hop plan of broadcast and reduce (coll_plan.h says what moves where and why
// the stores into the peers' next slot are safe): the push path's grid, flags and counters, launched
// for CollLaunchArgs::two_hop (coll_kernels.cu). A kernel of its own, not a branch of the push
// kernel: the branch took that kernel from 52-54 to 54-64 registers and a 192-byte stack frame
// (ptxas, sm_90). The host backend runs the same steps in host_collectives.cpp. Included by
// coll_kernels.cu only.
#pragma once
#include "collectives/coll_launch.h"
#include "collectives/device_reduce.h"
#include "collectives/device_sync.h"

namespace peerlink::coll {
namespace {  // one translation unit includes this

// Block b moves its share [rel, rel + per_block) of every chunk, as the push path splits it. A wait
// that ran out was recorded; the kernel then stops without advancing its counter, as the push path.
template <typename T, int Op>
__global__ void __launch_bounds__(1024) coll_two_hop_kernel(CollLaunchArgs c) {
  const LaunchArgs& a = c.a;
  uint64_t seq;
  if (!kernel_begin(a, seq)) return;
  const CollDesc& d = c.d;
  const DataLayout& L = a.layout;
  const T* src = static_cast<const T*>(a.src);
  T* dst = static_cast<T*>(a.dst);
  const int me = a.rank, n = a.world, root = d.root;
  const size_t C = c.chunk, pb = c.per_block, rel = size_t(blockIdx.x) * pb, shard = two_hop_shard(d);
  const bool reduce = d.kind == kReduce;
  const int mine = me == root ? -1 : owned_shard(d, me);
  const T* ins[kMaxRanks];
  T* outs[kMaxRanks];
  for (size_t k = 0; k < c.steps; ++k) {
    ++seq;
    const int slot = int(seq & 1), prev = slot ^ 1;
    auto at = [&](int r, int s, int pos) { return reinterpret_cast<T*>(a.data[r] + L.input(s, pos)) + rel; };
    // Chunk `chunk` of shard i as this block covers it: *lo (an element of the buffer) and the count.
    auto part = [&](int i, size_t chunk, size_t* lo) {
      size_t off, m = sub_range(shard_range(d, i, shard, &off), chunk, C, rel, pb, lo);
      *lo += off;
      return m;
    };
    size_t lo = 0, m;
    if (reduce || me == root)  // first hop: chunk k of every shard to its owner
      for (int i = 0; i < n - 1; ++i) {
        const int o = owner_rank(d, i);
        if (o == me || !(m = part(i, k, &lo))) continue;
        ins[0] = src + lo;
        outs[0] = at(o, slot, me);
        reduce_block<T, kOpSum>(ins, 1, outs, 1, m);
      }
    if (mine >= 0 && k > 0 && (m = part(mine, k - 1, &lo))) {
      // Second hop: chunk k - 1 of the owner's shard, out of its previous slot, stored into the
      // root's slot (reduce) or every other non-root's (broadcast) beside the first hop's pushes.
      if (reduce) {
        for (int r = 0; r < n; ++r) ins[r] = r == me ? src + lo : at(me, prev, r);
        outs[0] = at(root, slot, me);
        reduce_block<T, Op>(ins, n, outs, 1, m);
      } else {
        ins[0] = at(me, prev, root);
        int no = 0;
        outs[no++] = dst + lo;
        for (int q = 0; q < n; ++q)
          if (q != me && q != root) outs[no++] = at(q, slot, me);
        reduce_block<T, kOpSum>(ins, 1, outs, no, m);
      }
    }
    signal_peers(a, 0, seq);
    if (!wait_peers(a, 0, seq)) return;
    for (int i = 0; i < n - 1; ++i) {
      const int o = owner_rank(d, i);
      if (o == me) continue;
      // The second hop arrived: chunk k - 1 of shard i (reduce: at the root; broadcast: elsewhere).
      if (k > 0 && reduce == (me == root) && (m = part(i, k - 1, &lo))) {
        ins[0] = at(me, slot, o);
        outs[0] = dst + lo;
        reduce_block<T, kOpSum>(ins, 1, outs, 1, m);
      }
      if (!reduce && me == root && src != dst && (m = part(i, k, &lo))) {  // the root's own copy
        ins[0] = src + lo;
        outs[0] = dst + lo;
        reduce_block<T, kOpSum>(ins, 1, outs, 1, m);
      }
    }
  }
  kernel_end(a, seq);
}

}  // namespace
}  // namespace peerlink::coll
