// Kernels of all_gather, reduce_scatter, broadcast, reduce, all_to_all(v) (CUDA and HIP from one
// source). The data flow is coll_plan.h's, the flag protocol and counters allreduce's (layout.h,
// device_sync.h): everything remote is a store into the peer's scratch or inbox, every spin reads
// local memory and is bounded by the device clock, sequence numbers live on the device (per-block
// counters), so calls are graph-capturable and replays need no host work.
#include "collectives/coll_launch.h"
#include "collectives/coll_two_hop.h"
#include "collectives/device_compat.h"
#include "collectives/device_reduce.h"
#include "collectives/device_sync.h"
#include "collectives/reduce_ops.h"
#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::coll {
namespace {

// ---- push path: chunks through the scratch input regions, per-block flags -------------------
// Block b of every rank moves the sub-range [b*per_block, +per_block) of each chunk and exchanges
// flags only with block b of the peers (the grid and sub-ranges are the same on every rank:
// collectives.cpp), so blocks pipeline independently.
template <typename T, int Op>
__global__ void __launch_bounds__(1024) coll_push_kernel(CollLaunchArgs c) {
  const LaunchArgs& a = c.a;
  uint64_t seq0;
  if (!kernel_begin(a, seq0)) return;
  const CollDesc& d = c.d;
  const DataLayout& L = a.layout;
  const T* src = static_cast<const T*>(a.src);
  T* dst = static_cast<T*>(a.dst);
  const int me = a.rank, n = a.world, b = blockIdx.x;
  const size_t C = c.chunk, rel = size_t(b) * c.per_block;
  uint64_t seq = seq0;
  size_t steps = c.steps;
  if (d.kind == kAllToAllV) {
    // Header step: ranks know only their own counts; agree on the largest piece (8 bytes per
    // block in the input region of this step's slot).
    ++seq;
    const int slot = int(seq & 1);
    const size_t mine = local_max_piece(d);
    const int p = threadIdx.x;
    if (p < n && p != me)
      *reinterpret_cast<volatile uint64_t*>(a.data[p] + L.input(slot, me) + size_t(b) * 8) = mine;
    signal_peers(a, 0, seq);
    if (!wait_peers(a, 0, seq)) return;
    size_t mx = mine;
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      size_t x = *reinterpret_cast<const volatile uint64_t*>(a.data[me] + L.input(slot, r) + size_t(b) * 8);
      mx = x > mx ? x : mx;
    }
    steps = (mx + C - 1) / C;
  }
  const T* ins[kMaxRanks];
  T* outs[1];
  for (size_t k = 0; k < steps; ++k) {
    ++seq;
    const int slot = int(seq & 1);
    size_t lo = 0, m;
    for (int p = 0; p < n; ++p) {  // push our sub-range of chunk k of every outgoing piece
      if (p == me) continue;
      Piece sp = send_piece(d, p);
      if (!(m = sub_range(sp.count, k, C, rel, c.per_block, &lo))) continue;
      ins[0] = src + sp.src_off + lo;
      outs[0] = reinterpret_cast<T*>(a.data[p] + L.input(slot, me)) + rel;
      reduce_block<T, kOpSum>(ins, 1, outs, 1, m);
    }
    signal_peers(a, 0, seq);
    if (!wait_peers(a, 0, seq)) return;
    auto scratch = [&](int r) { return reinterpret_cast<const T*>(a.data[me] + L.input(slot, r)) + rel; };
    if (reducing(d.kind)) {
      Piece rp = recv_piece(d, me);
      if ((m = sub_range(rp.count, k, C, rel, c.per_block, &lo))) {
        for (int r = 0; r < n; ++r) ins[r] = r == me ? src + rp.src_off + lo : scratch(r);
        outs[0] = dst + rp.dst_off + lo;
        reduce_block<T, Op>(ins, n, outs, 1, m);
      }
    } else {
      for (int r = 0; r < n; ++r) {
        Piece rp = recv_piece(d, r);
        if (!(m = sub_range(rp.count, k, C, rel, c.per_block, &lo))) continue;
        ins[0] = r == me ? src + send_piece(d, me).src_off + lo : scratch(r);
        outs[0] = dst + rp.dst_off + lo;
        if (ins[0] != outs[0]) reduce_block<T, kOpSum>(ins, 1, outs, 1, m);
      }
    }
    // The next step overwrites the other slot; this block's reads of this one are ordered before
    // its next signal by signal_peers' barrier.
  }
  kernel_end(a, seq);
}

// ---- LL path: one step, 8 data bytes + flags per 16-byte line ---------------------------------
// Block b handles words [b*wpb, (b+1)*wpb) of every piece. An empty piece sends one token line
// (block 0), so every ordered pair exchanges a line per call (coll_plan.h). No barrier, no fence.

// Waits for line `line` of rank `from` to carry `flag`. False when the wait ran out (reported) or
// another block gave up.
__device__ __forceinline__ bool wait_line(const LaunchArgs& a, int from, const char* line, uint32_t flag, uint64_t* v) {
  uint32_t d0, f0, d1, f1;
  load_ll(line, d0, f0, d1, f1);
  if (f0 != flag || f1 != flag) {
    uint64_t t0 = now_ns();
    for (uint32_t spins = 1;; ++spins) {
      load_ll(line, d0, f0, d1, f1);
      if (f0 == flag && f1 == flag) break;
      if ((spins & 1023) == 0) {
        if (*reinterpret_cast<volatile uint32_t*>(&a.flags[a.rank]->abort)) return false;
        if (now_ns() - t0 > a.timeout_ns) {
          report_timeout(a, from);
          return false;
        }
      }
    }
  }
  *v = (uint64_t(d1) << 32) | d0;
  return true;
}

// One instantiation per kind (Kind == d.kind): the kind's branches fold away, so a launch runs a
// short straight-line body. One-GPU stand-in, graph, 8 B-32 KB, A/B against one kernel for all
// kinds: all_gather -0.3 us, broadcast and all_to_all -0.45, reduce -0.3,
// reduce_scatter -0.15.
template <typename T, int Op, int Kind>
__global__ void __launch_bounds__(1024) coll_ll_kernel(CollLaunchArgs c) {
  const LaunchArgs& a = c.a;
  const CollDesc& d = c.d;
  const T* src = static_cast<const T*>(a.src);
  const int me = a.rank, n = a.world;
  const size_t w0 = size_t(blockIdx.x) * c.ll_words_per_block, wend = w0 + c.ll_words_per_block;
  auto words = [](size_t bytes) { return (bytes + 7) / 8; };
  auto al8 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7) == 0; };
  // The thread's first word for the first peer is loaded while the counter read is in flight, as
  // allreduce's LL kernel does: one memory latency less per call (stand-in:
  // all_gather 2.26 -> 2.07 us, all_to_all 2.35 -> 2.15 at 4 KB). Only whole words and 4-byte
  // tails, one aligned load each: a misaligned piece's eight byte loads there made an 8 B
  // all_to_all 0.1 us slower, and with a partial last word loaded byte by byte
  // here, one all_gather case (bf16, 501 elements, 2 processes on one GPU) got one wrong byte,
  // every run (memcheck clean, the SASS's scoreboard waits
  // looked right; cause not found). The partial word is loaded after the counter read instead.
  const int p0 = me == 0 ? 1 : 0;
  const size_t wf = w0 + threadIdx.x;
  uint64_t first = 0;
  bool have_first = false;
  uint64_t seq0;
  if (!kernel_begin(a, seq0, [&] {
        if (p0 < n) {
          Piece sp = send_piece(d, p0, Kind);
          const size_t bytes = sp.count * sizeof(T);
          const char* s = reinterpret_cast<const char*>(src + sp.src_off);
          const size_t off = wf * 8;
          if (al8(s) && wf < wend && (off + 8 <= bytes || off + 4 == bytes)) {
            first = load_word(s, wf, bytes, true);
            have_first = true;
          }
        }
      }))
    return;
  const DataLayout& L = a.layout;
  T* dst = static_cast<T*>(a.dst);
  const uint64_t seq = seq0 + 1;
  const uint32_t flag = uint32_t(seq);
  const int slot = int(seq & 1);
  const bool token_thread = blockIdx.x == 0 && threadIdx.x == 0;
  // `first` is also word wf of our own piece when that piece is what we pushed to p0 (all_gather,
  // the root of reduce and broadcast): the copy or reduction of our own part needs no second load.
  const Piece sp0 = p0 < n ? send_piece(d, p0, Kind) : Piece{};
  const char* s0 = reinterpret_cast<const char*>(src + sp0.src_off);
  auto own_word = [&](const char* own, size_t own_bytes, size_t w, bool al) {
    const bool same = have_first && own == s0 && own_bytes == sp0.count * sizeof(T);
    return same && w == wf ? first : load_word(own, w, own_bytes, al);
  };

  for (int p = 0; p < n; ++p) {  // push
    if (p == me) continue;
    Piece sp = send_piece(d, p, Kind);
    const size_t bytes = sp.count * sizeof(T);
    const char* s = reinterpret_cast<const char*>(src + sp.src_off);
    char* lines = a.data[p] + L.ll(slot, me);
    if (bytes == 0) {
      if (token_thread) store_ll(lines, 0, 0, flag);
      continue;
    }
    const size_t nw = words(bytes), hi = wend < nw ? wend : nw;
    const bool al = al8(s);
    for (size_t w = wf; w < hi; w += blockDim.x) {
      uint64_t v = have_first && p == p0 && w == wf ? first : load_word(s, w, bytes, al);
      store_ll(lines + w * 16, uint32_t(v), uint32_t(v >> 32), flag);
    }
  }
  bool ok = true;
  auto token = [&](int r) {  // an empty incoming piece: its token line
    uint64_t v;
    if (token_thread) ok = ok && wait_line(a, r, a.data[me] + L.ll(slot, r), flag, &v);
  };
  if (reducing(Kind)) {
    Piece rp = recv_piece(d, me, Kind);
    const size_t bytes = rp.count * sizeof(T);
    if (bytes == 0) {
      for (int r = 0; r < n; ++r)
        if (r != me) token(r);
    } else {
      using A = Acc<T>;
      constexpr int E = 8 / sizeof(T);
      const char* own = reinterpret_cast<const char*>(src + rp.src_off);
      char* out = reinterpret_cast<char*>(dst + rp.dst_off);
      const bool al = al8(own) && al8(out);
      const size_t nw = words(bytes), hi = wend < nw ? wend : nw;
      for (size_t w = w0 + threadIdx.x; w < hi && ok; w += blockDim.x) {
        typename A::type acc[E];
        for (int r = 0; r < n && ok; ++r) {
          uint64_t v;
          if (r == me) v = own_word(own, bytes, w, al);
          else ok = wait_line(a, r, a.data[me] + L.ll(slot, r) + w * 16, flag, &v);
          T x[E];
          memcpy(x, &v, 8);
#pragma unroll
          for (int j = 0; j < E; ++j) acc[j] = r == 0 ? A::in(x[j]) : Apply<Op>::run(acc[j], A::in(x[j]));
        }
        if (!ok) break;
        T o[E];
#pragma unroll
        for (int j = 0; j < E; ++j) o[j] = A::out(finish<Op>(acc[j], n));
        uint64_t v;
        memcpy(&v, o, 8);
        store_word(out, w, bytes, al, v);  // bytes past the piece's end are never stored
      }
    }
  } else {
    for (int r = 0; r < n && ok; ++r) {
      const MoveTarget t = move_target(d, r, Kind, reinterpret_cast<const char*>(src), reinterpret_cast<char*>(dst));
      if (t.token) token(r);
      if (t.token || t.skip) continue;
      const size_t nw = words(t.bytes), hi = wend < nw ? wend : nw;
      for (size_t w = w0 + threadIdx.x; w < hi && ok; w += blockDim.x) {
        uint64_t v = 0;
        if (t.in) v = own_word(t.in, t.bytes, w, t.aligned8);
        else ok = wait_line(a, r, a.data[me] + L.ll(slot, r) + w * 16, flag, &v);
        if (ok) store_word(t.out, w, t.bytes, t.aligned8, v);
      }
    }
  }
  kernel_end(a, seq);  // as allreduce's LL kernel: a failed wait has set the abort word already
}

// ---- copy-engine path: the flag steps between the copies (coll_ce.cpp) ----------------------
// One block of a few threads: thread p < world signals / waits for rank p (block 0's inbox).
// The copies before this kernel on its stream have completed when it starts, so the release store
// of the flag publishes them; the copies after it on the stream (or on streams waiting for an event
// recorded after it) start after the peers' flags were seen.
__global__ void coll_ce_step_kernel(LaunchArgs a, int entry) {
  uint64_t seq0;
  if (!kernel_begin(a, seq0)) return;
  uint64_t seq = seq0 + 1;
  signal_peers(a, 0, seq);
  if (!wait_peers(a, 0, seq)) return;
  if (entry && (seq & 1) == 0) {  // the next step would be odd: one more empty step
    ++seq;
    signal_peers(a, 0, seq);
    if (!wait_peers(a, 0, seq)) return;
  }
  kernel_end(a, seq);
}

// Copy-engine path of the reducing kinds: the receiver reduces its own input and the peers'
// scratch chunks (rank order, as every other path) into its output; block b takes
// [b*per_block, +per_block) (a multiple of 16 bytes, so 16-byte aligned inputs stay aligned).
template <typename T, int Op>
__global__ void __launch_bounds__(1024) coll_ce_reduce_kernel(CeReduceArgs r) {
  const size_t lo = size_t(blockIdx.x) * r.per_block;
  if (lo >= r.count) return;
  const size_t m = r.count - lo < r.per_block ? r.count - lo : r.per_block;
  const T* ins[kMaxRanks];
  for (int i = 0; i < r.nin; ++i) ins[i] = static_cast<const T*>(r.ins[i]) + lo;
  T* outs[1] = {static_cast<T*>(r.out) + lo};
  reduce_block<T, Op>(ins, r.nin, outs, 1, m);
}

template <typename T, int Op, int Kind>
void launch_ll(const CollLaunchArgs& c, DevStream st) {
  gpu::dev::launch(coll_ll_kernel<T, Op, Kind>, unsigned(c.a.blocks), unsigned(c.a.threads), st, c.a.pdl, c);
}

template <typename T, int Op>
void launch_typed(const CollLaunchArgs& c, DevStream st) {
  const LaunchArgs& a = c.a;
  if (c.ll) {
    switch (c.d.kind) {
      case kReduceScatter: return launch_ll<T, Op, kReduceScatter>(c, st);
      case kReduce: return launch_ll<T, Op, kReduce>(c, st);
    }
    if constexpr (Op == kOpSum) {  // the kinds that only move data run with kOpSum (launch_op)
      switch (c.d.kind) {
        case kAllGather: return launch_ll<T, Op, kAllGather>(c, st);
        case kBroadcast: return launch_ll<T, Op, kBroadcast>(c, st);
        case kAllToAll: return launch_ll<T, Op, kAllToAll>(c, st);
        case kAllToAllV: return launch_ll<T, Op, kAllToAllV>(c, st);  // LL only when forced (Options)
      }
    }
    throw InvalidArgument(common::format("collective: no LL kernel for kind {} with op {}", c.d.kind, Op));
  } else if (c.two_hop) {
    gpu::dev::launch(coll_two_hop_kernel<T, Op>, unsigned(a.blocks), unsigned(a.threads), st, a.pdl, c);
  } else {
    gpu::dev::launch(coll_push_kernel<T, Op>, unsigned(a.blocks), unsigned(a.threads), st, a.pdl, c);
  }
}

template <typename T>
void launch_op(const CollLaunchArgs& c, DevStream st) {
  if (!reducing(c.d.kind)) return launch_typed<T, kOpSum>(c, st);  // moves only: one instantiation
  switch (c.a.op) {
    case kOpSum: return launch_typed<T, kOpSum>(c, st);
    case kOpMax: return launch_typed<T, kOpMax>(c, st);
    case kOpMin: return launch_typed<T, kOpMin>(c, st);
    case kOpProd: return launch_typed<T, kOpProd>(c, st);
    case kOpAvg: return launch_typed<T, kOpAvg>(c, st);
  }
  throw InvalidArgument(common::format("collective: unknown reduce op code {}", c.a.op));
}

}  // namespace

void launch_collective(const CollLaunchArgs& c, void* stream) {
  const LaunchArgs& a = c.a;
  if (a.blocks < 1 || a.blocks > kMaxBlocks || a.threads < kWarpSize || a.threads > 1024)
    throw InvalidArgument(common::format("collective launch: blocks {} (1..{}), threads {} ({}..1024)", a.blocks,
                                         kMaxBlocks, a.threads, kWarpSize));
  if (c.ll128) {
    launch_coll_ll128(c, stream);
    gpu::dev::check_launch("collective kernel launch");
    return;
  }
  if (!c.ll && (c.chunk == 0 || c.per_block == 0))
    throw InvalidArgument(common::format("collective launch: chunk {}, per block {}", c.chunk, c.per_block));
  DevStream st = static_cast<DevStream>(stream);
  bool known = with_type(a.dtype, [&](auto t) { launch_op<decltype(t)>(c, st); });
  if (!known) throw InvalidArgument(common::format("collective: unknown dtype code {}", a.dtype));
  gpu::dev::check_launch("collective kernel launch");
}

void launch_ce_reduce(const CeReduceArgs& r, void* stream) {
  if (r.nin < 1 || r.nin > kMaxRanks || r.blocks < 1 || r.blocks > kMaxBlocks || r.per_block == 0)
    throw InvalidArgument(common::format("collective copy-engine reduce: {} inputs, {} blocks, {} elements per block",
                                         r.nin, r.blocks, r.per_block));
  DevStream st = static_cast<DevStream>(stream);
  bool known_op = true;
  bool known = with_type(r.dtype, [&](auto t) {
    known_op = with_op(r.op, [&](auto op) {
      gpu::dev::launch(coll_ce_reduce_kernel<decltype(t), decltype(op)::value>, unsigned(r.blocks), 512u, st, false, r);
    });
  });
  if (!known || !known_op)
    throw InvalidArgument(
        common::format("collective copy-engine reduce: unknown dtype code {} or op code {}", r.dtype, r.op));
  gpu::dev::check_launch("collective copy-engine reduce launch");
}

void preload_ce_kernels() {
  gpu::dev::preload(coll_ce_step_kernel);
  for (int t = kF32; t <= kI64; ++t)
    with_type(t, [&](auto ty) {
      for (int o = kOpSum; o <= kOpAvg; ++o)
        with_op(o, [&](auto op) { gpu::dev::preload(coll_ce_reduce_kernel<decltype(ty), decltype(op)::value>); });
    });
}

void launch_ce_step(const LaunchArgs& a, bool entry, void* stream) {
  if (a.world < 2 || a.world > kMaxRanks)
    throw InvalidArgument(common::format("collective copy-engine step: world {} (2..{})", a.world, kMaxRanks));
  // No PDL: the kernel follows copies and event waits, where it gains nothing.
  gpu::dev::launch(coll_ce_step_kernel, 1u, unsigned(kWarpSize), static_cast<DevStream>(stream), false, a,
                   entry ? 1 : 0);
  gpu::dev::check_launch("collective copy-engine step launch");
}

}  // namespace peerlink::coll
