// Fused allreduce + residual add + RMSNorm through the flag-based scratch (fused_plan.h: OneShot,
// TwoShot), the epilogue alone (Local: one rank, add_rmsnorm) and the launch of every fused path.
//
// The scratch paths follow the allreduce's generic kernel (allreduce_kernels.cu) step for step:
// sequence number seq0 + 1 + step, slot seq & 1, data pushed into the peers' regions of that slot,
// signal_peers / wait_peers per block index and phase, kernel_end with the last sequence number.
// Block b exchanges rows b, b + G, ... of every step (one-shot) or of every shard (two-shot) with
// block b of the peers, at the same region offsets in every step, which is what lets two slots
// serve any number of steps (layout.h).
#include "collectives/fused_device.h"
#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::coll::fused {
namespace {

// The thread's units of a row: unit k is threadIdx.x + k * blockDim.x (at most f.slots of them).
template <typename T>
struct Units {
  static constexpr int V = WordOf<T>::V, E = WordOf<T>::E;
  size_t units;
  int slots;
  __device__ size_t unit(int k) const { return size_t(threadIdx.x) + size_t(k) * blockDim.x; }
  __device__ bool has(int k) const { return k < slots && unit(k) < units; }
  __device__ size_t word_at(int k, int h) const { return has(k) ? unit(k) * V + size_t(h) * E : kNoWord; }
  // Byte offset of the thread's unit k in a row.
  __device__ size_t off(int k) const { return unit(k) * 16; }
};

template <typename T, bool Quant, bool TwoShot>
__global__ void __launch_bounds__(kFusedThreadsMax) fused_flag_kernel(FusedArgs f) {
  constexpr int E = WordOf<T>::E;
  const LaunchArgs& a = f.a;
  const size_t row_bytes = f.hidden * sizeof(T), rows = f.tokens, per_step = f.rows_per_step;
  const size_t steps = (rows + per_step - 1) / per_step;
  const size_t b = blockIdx.x, G = gridDim.x;
  const Units<T> U{f.hidden / WordOf<T>::V, f.slots};
  auto word_at = [&](int k, int h) { return U.word_at(k, h); };
  const char* in = static_cast<const char*>(a.src);
  const char* resid = static_cast<const char*>(f.residual_in);
  Pack16 own[kFusedSlots], res[kFusedSlots], wt[kFusedSlots];
  float scale = 1.f;
  uint64_t seq0;
  if (!kernel_begin(a, seq0, [&] {
#pragma unroll
        for (int k = 0; k < kFusedSlots; ++k)
          if (U.has(k)) wt[k] = load16(static_cast<const char*>(f.weight) + U.off(k));
        if (Quant) scale = *f.scale;
      }))
    return;
  const int me = a.rank, n = a.world;
  const DataLayout& L = a.layout;
  // Rank `from`'s row i of this step in rank `owner`'s region (input or result) of `slot`.
  auto region = [&](int owner, bool result, int slot, int from, size_t i) {
    return a.data[owner] + (result ? L.result(slot, from) : L.input(slot, from)) + i * row_bytes;
  };
  // Pushes row `row` of `src` (input rows; two-shot: the residual_out words in res) to every peer.
  auto push_row = [&](const char* src, char* const* dst) {
#pragma unroll
    for (int k = 0; k < kFusedSlots; ++k)
      if (U.has(k)) {
        const Pack16 v = src ? load16(src + U.off(k)) : res[k];
        for (int p = 0; p < n; ++p)
          if (p != me) *reinterpret_cast<Pack16*>(dst[p] + U.off(k)) = v;
      }
  };
  char* dst[kMaxRanks];
  // The row's input and residual into own / res (the block's first row of a step is loaded before
  // the wait for the peers, the others when their turn comes).
  auto load_row = [&](size_t row) {
#pragma unroll
    for (int k = 0; k < kFusedSlots; ++k) {
      if (!U.has(k)) continue;
      own[k] = load16(in + row * row_bytes + U.off(k));
      res[k] = load16(resid + row * row_bytes + U.off(k));
    }
  };
  // Reduces row `row` (ranks in order: ours from own, the peers' from our input region at row i)
  // and adds the residual: res becomes the row's residual_out words.
  auto reduce_row = [&](int slot, size_t row, size_t i) {
    if (i != b) load_row(row);
#pragma unroll
    for (int k = 0; k < kFusedSlots; ++k) {
      if (!U.has(k)) continue;
      float acc0[E], acc1[E];
      for (int r = 0; r < n; ++r) {
        const Pack16 v = r == me ? own[k] : load_fresh(reinterpret_cast<const Pack16*>(region(me, false, slot, r, i) + U.off(k)));
        fold<T>(acc0, v.lo, r == 0);
        fold<T>(acc1, v.hi, r == 0);
      }
      res[k].lo = residual_word<T>(acc0, res[k].lo);
      res[k].hi = residual_word<T>(acc1, res[k].hi);
    }
  };
  bool ok = true;
  for (size_t step = 0; step < steps && ok; ++step) {
    const uint64_t seq = seq0 + 1 + step;
    const int slot = int(seq & 1);
    const size_t s0 = step * per_step, len = rows - s0 < per_step ? rows - s0 : per_step;
    if (!TwoShot) {
      for (int p = 0; p < n; ++p) dst[p] = nullptr;
      for (size_t i = b; i < len; i += G) {
        for (int p = 0; p < n; ++p)
          if (p != me) dst[p] = region(p, false, slot, me, i);
        push_row(in + (s0 + i) * row_bytes, dst);
      }
      if (b < len) load_row(s0 + b);
      signal_peers(a, 0, seq);
      if (!(ok = wait_peers(a, 0, seq))) break;
      for (size_t i = b; i < len; i += G) {
        reduce_row(slot, s0 + i, i);
        finish_row<T, Quant>(f, s0 + i, res, wt, scale, false, word_at);
      }
    } else {
      // A: our copy of shard p's rows goes to its owner p.
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        const RowRange sp = fused_shard(len, n, p);
        for (size_t i = b; i < sp.n; i += G) {
          char* to = region(p, false, slot, me, i);
          const char* from = in + (s0 + sp.lo + i) * row_bytes;
#pragma unroll
          for (int k = 0; k < kFusedSlots; ++k)
            if (U.has(k)) *reinterpret_cast<Pack16*>(to + U.off(k)) = load16(from + U.off(k));
        }
      }
      const RowRange sm = fused_shard(len, n, me);
      if (b < sm.n) load_row(s0 + sm.lo + b);
      signal_peers(a, 0, seq);
      if (!(ok = wait_peers(a, 0, seq))) break;
      // B: our shard's rows: reduce, add the residual, push residual_out to every peer, finish.
      for (size_t i = b; i < sm.n; i += G) {
        reduce_row(slot, s0 + sm.lo + i, i);
        for (int p = 0; p < n; ++p)
          if (p != me) dst[p] = region(p, true, slot, me, i);
        push_row(nullptr, dst);
        finish_row<T, Quant>(f, s0 + sm.lo + i, res, wt, scale, false, word_at);
      }
      signal_peers(a, 1, seq);
      if (!(ok = wait_peers(a, 1, seq))) break;
      // C: the other shards' residual_out rows arrived in our result region: the same finish.
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        const RowRange sp = fused_shard(len, n, p);
        for (size_t i = b; i < sp.n; i += G) {
#pragma unroll
          for (int k = 0; k < kFusedSlots; ++k)
            if (U.has(k)) res[k] = load_fresh(reinterpret_cast<const Pack16*>(region(me, true, slot, p, i) + U.off(k)));
          finish_row<T, Quant>(f, s0 + sp.lo + i, res, wt, scale, false, word_at);
        }
      }
    }
  }
  if (ok) kernel_end(a, seq0 + steps);
}

// One rank: the epilogue on the input alone (no scratch, no flags).
template <typename T, bool Quant>
__global__ void __launch_bounds__(kFusedThreadsMax) fused_local_kernel(FusedArgs f) {
  constexpr int E = WordOf<T>::E;
  const Units<T> U{f.hidden / WordOf<T>::V, f.slots};
  auto word_at = [&](int k, int h) { return U.word_at(k, h); };
  const size_t row_bytes = f.hidden * sizeof(T);
  const char* in = static_cast<const char*>(f.a.src);
  const char* resid = static_cast<const char*>(f.residual_in);
  Pack16 res[kFusedSlots], wt[kFusedSlots];
#pragma unroll
  for (int k = 0; k < kFusedSlots; ++k)
    if (U.has(k)) wt[k] = load16(static_cast<const char*>(f.weight) + U.off(k));
  const float scale = Quant ? *f.scale : 1.f;
  for (size_t row = blockIdx.x; row < f.tokens; row += gridDim.x) {
#pragma unroll
    for (int k = 0; k < kFusedSlots; ++k) {
      if (!U.has(k)) continue;
      const Pack16 x = load16(in + row * row_bytes + U.off(k));
      res[k] = load16(resid + row * row_bytes + U.off(k));
      float acc0[E], acc1[E];
      fold<T>(acc0, x.lo, true);
      fold<T>(acc1, x.hi, true);
      res[k].lo = residual_word<T>(acc0, res[k].lo);
      res[k].hi = residual_word<T>(acc1, res[k].hi);
    }
    finish_row<T, Quant>(f, row, res, wt, scale, false, word_at);
  }
}

template <typename T, bool Quant>
void launch_typed(const FusedArgs& f, DevStream st) {
  switch (f.path) {
    case kFusedLocal: launch_fused_kernel(fused_local_kernel<T, Quant>, f, st); break;
    case kFusedOneShot: launch_fused_kernel(fused_flag_kernel<T, Quant, false>, f, st); break;
    case kFusedTwoShot: launch_fused_kernel(fused_flag_kernel<T, Quant, true>, f, st); break;
    default:
      throw InvalidArgument(common::format("allreduce_add_rmsnorm: unknown path code {}", f.path));
  }
}

}  // namespace
}  // namespace peerlink::coll::fused

namespace peerlink::coll {

void launch_fused(const FusedArgs& f, void* stream) {
  const int max_blocks = f.path == kFusedLocal ? (1 << 30) : kMaxBlocks;
  if (f.a.blocks < 1 || f.a.blocks > max_blocks || f.a.threads < kWarpSize || f.a.threads > kFusedThreadsMax ||
      f.a.threads % kWarpSize != 0 || f.slots < 1 || f.slots > kFusedSlots)
    throw InvalidArgument(common::format(
        "allreduce_add_rmsnorm launch: blocks {} (1..{}), threads {} (a multiple of {} up to {}), slots {} (1..{})",
        f.a.blocks, max_blocks, f.a.threads, kWarpSize, kFusedThreadsMax, f.slots, kFusedSlots));
  if (f.tokens == 0) return;
  DevStream st = static_cast<DevStream>(stream);
  if (f.path == kFusedLL) {
    fused::launch_fused_ll(f, st);
  } else if (f.path == kFusedLL128) {
    fused::launch_fused_ll128(f, st);
  } else {
    bool known = fused::with_fused_type(f.a.dtype, [&](auto t) {
      using T = decltype(t);
      if (f.quant_out) fused::launch_typed<T, true>(f, st);
      else fused::launch_typed<T, false>(f, st);
    });
    if (!known) throw InvalidArgument(common::format("allreduce_add_rmsnorm: unknown dtype code {}", f.a.dtype));
  }
  gpu::dev::check_launch("allreduce_add_rmsnorm kernel launch");
}

}  // namespace peerlink::coll
