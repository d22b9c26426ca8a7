// Allreduce kernels (CUDA and HIP from one source). Data flow and flag protocol: see layout.h.
// One kernel runs all steps (chunks) of a call; block b of every rank exchanges data and flags only
// with block b of the peers, so blocks pipeline independently without any grid-wide barrier.
// Everything remote is a store (data pushed into the peer's scratch, flags pushed into the peer's
// inbox); every spin reads local memory and is bounded by a device clock.
#include "collectives/device_compat.h"
#include "collectives/device_launch.h"
#include "collectives/device_reduce.h"
#include "collectives/device_sync.h"
#include "collectives/reduce_ops.h"
#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::coll {
namespace {

// Bounded to 1024 threads so every instantiation fits the register file at the bandwidth grid
// (without it some types need 72 registers and a 1024-thread launch fails).
template <typename T, int Op, bool OneShot>
__global__ void __launch_bounds__(1024) allreduce_kernel(LaunchArgs a) {
  uint64_t seq0;
  if (!kernel_begin(a, seq0)) return;
  const int b = blockIdx.x;
  const Split& s = a.split;
  const DataLayout& L = a.layout;
  const T* src_all = static_cast<const T*>(a.src);
  T* dst_all = static_cast<T*>(a.dst);
  const int me = a.rank, n = a.world;
  const T* ins[kMaxRanks];
  T* outs[kMaxRanks];
  bool ok = true;
  for (size_t step = 0; step < s.steps && ok; ++step) {
    const uint64_t seq = seq0 + 1 + step;
    const int slot = int(seq & 1);
    const size_t e0 = step * s.step_elems;
    const size_t len = s.count - e0 < s.step_elems ? s.count - e0 : s.step_elems;
    const T* src = src_all + e0;
    T* dst = dst_all + e0;
    if (OneShot) {
      size_t lo = b * s.per_block, hi = lo + s.per_block;
      if (hi > len) hi = len;
      size_t m = lo < hi ? hi - lo : 0;
      int no = 0;
      for (int p = 0; p < n; ++p)
        if (p != me) outs[no++] = reinterpret_cast<T*>(a.data[p] + L.input(slot, me)) + lo;
      ins[0] = src + lo;
      if (m) reduce_block<T, Op>(ins, 1, outs, no, m);
      signal_peers(a, 0, seq);
      if (!(ok = wait_peers(a, 0, seq))) break;
      for (int r = 0; r < n; ++r)
        ins[r] = r == me ? src + lo : reinterpret_cast<const T*>(a.data[me] + L.input(slot, r)) + lo;
      outs[0] = dst + lo;
      if (m) reduce_block<T, Op>(ins, n, outs, 1, m);
    } else {
      // Shard q = [q*shard, (q+1)*shard) of this step; this block owns [rel_lo, rel_hi) of each.
      auto range = [&](int q, size_t* lo, size_t* m) {
        size_t s0 = q * s.shard, s1 = s0 + s.shard;
        if (s1 > len) s1 = len;
        size_t rl = b * s.per_block, rh = rl + s.per_block;
        *lo = s0 + rl;
        *m = (s0 + rl < s1) ? ((s0 + rh < s1 ? s0 + rh : s1) - (s0 + rl)) : 0;
      };
      size_t rel = b * s.per_block, lo, m;
      // A: push our copy of shard p to its owner p.
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        range(p, &lo, &m);
        ins[0] = src + lo;
        outs[0] = reinterpret_cast<T*>(a.data[p] + L.input(slot, me)) + rel;
        if (m) reduce_block<T, Op>(ins, 1, outs, 1, m);
      }
      signal_peers(a, 0, seq);
      if (!(ok = wait_peers(a, 0, seq))) break;
      // B: reduce our shard in rank order; write it to dst and push it to every peer.
      range(me, &lo, &m);
      for (int r = 0; r < n; ++r)
        ins[r] = r == me ? src + lo : reinterpret_cast<const T*>(a.data[me] + L.input(slot, r)) + rel;
      int no = 0;
      outs[no++] = dst + lo;
      for (int p = 0; p < n; ++p)
        if (p != me) outs[no++] = reinterpret_cast<T*>(a.data[p] + L.result(slot, me)) + rel;
      if (m) reduce_block<T, Op>(ins, n, outs, no, m);
      signal_peers(a, 1, seq);
      if (!(ok = wait_peers(a, 1, seq))) break;
      // C: the other shards arrived in our result region.
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        range(p, &lo, &m);
        ins[0] = reinterpret_cast<const T*>(a.data[me] + L.result(slot, p)) + rel;
        outs[0] = dst + lo;
        if (m) reduce_block<T, Op>(ins, 1, outs, 1, m);
      }
    }
  }
  if (ok) kernel_end(a, seq0 + s.steps);
}


// ---- one-shot through LL lines (small messages, one step) ------------------------------------
// Each thread owns 8-byte words of the message: it pushes its words (with the step's flag) into
// every peer's LL area, then polls its own LL area for the same words of every rank and reduces
// them in rank order. No barrier, no fence, no separate flag: latency is one NVLink write.

template <typename T, int Op>
__global__ void __launch_bounds__(1024) oneshot_ll_kernel(LaunchArgs a) {
  const char* src = static_cast<const char*>(a.src);
  char* dst = static_cast<char*>(a.dst);
  const size_t bytes = a.split.count * sizeof(T);
  const size_t nwords = (bytes + 7) / 8;
  const bool aligned = ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 7) == 0;
  const int b = blockIdx.x;
  size_t w0 = size_t(b) * a.ll_words_per_block, w1 = w0 + a.ll_words_per_block;
  if (w1 > nwords) w1 = nwords;
  // The thread's first word (usually its only one) is loaded while the counter read is in flight
  // and kept for the reduction.
  const size_t wf = w0 + threadIdx.x;
  uint64_t first = 0;
  uint64_t seq0;
  if (!kernel_begin(a, seq0, [&] {
        if (wf < w1) first = load_word(src, wf, bytes, aligned);
      }))
    return;
  FlagArea* mine = a.flags[a.rank];
  const uint64_t seq = seq0 + 1;
  const uint32_t flag = uint32_t(seq);
  const int slot = int(seq & 1);
  const int me = a.rank, n = a.world;
  const DataLayout& L = a.layout;
  for (size_t w = wf; w < w1; w += blockDim.x) {
    uint64_t v = w == wf ? first : load_word(src, w, bytes, aligned);
    for (int p = 0; p < n; ++p)
      if (p != me) store_ll(a.data[p] + L.ll(slot, me) + w * 16, uint32_t(v), uint32_t(v >> 32), flag);
  }
  using A = Acc<T>;
  constexpr int E = 8 / sizeof(T);
  bool ok = true;
  for (size_t w = wf; w < w1 && ok; w += blockDim.x) {
    typename A::type acc[E];
    for (int r = 0; r < n && ok; ++r) {
      uint64_t v;
      if (r == me) {
        v = w == wf ? first : load_word(src, w, bytes, aligned);
      } else {
        const char* line = a.data[me] + L.ll(slot, r) + w * 16;
        uint32_t d0, f0, d1, f1;
        load_ll(line, d0, f0, d1, f1);
        if (f0 != flag || f1 != flag) {
          uint64_t t0 = now_ns();
          for (uint32_t spins = 1;; ++spins) {
            load_ll(line, d0, f0, d1, f1);
            if (f0 == flag && f1 == flag) break;
            if ((spins & 1023) == 0) {
              volatile uint32_t* abort = &mine->abort;
              if (*abort) { ok = false; break; }
              if (now_ns() - t0 > a.timeout_ns) {
                report_timeout(a, r);
                ok = false;
                break;
              }
            }
          }
        }
        v = (uint64_t(d1) << 32) | d0;
      }
      T x[E];
      memcpy(x, &v, 8);
#pragma unroll
      for (int j = 0; j < E; ++j) acc[j] = r == 0 ? A::in(x[j]) : Apply<Op>::run(acc[j], A::in(x[j]));
    }
    if (!ok) break;
    T out[E];
#pragma unroll
    for (int j = 0; j < E; ++j) out[j] = A::out(finish<Op>(acc[j], n));
    uint64_t v;
    memcpy(&v, out, 8);
    store_word(dst, w, bytes, aligned, v);
  }
  kernel_end(a, seq);
}

template <typename T, int Op>
void launch_typed(const LaunchArgs& a, DevStream st) {
  if (a.ll)
    launch_kernel(oneshot_ll_kernel<T, Op>, a, st);
  else if (a.one_shot)
    launch_kernel(allreduce_kernel<T, Op, true>, a, st);
  else
    launch_kernel(allreduce_kernel<T, Op, false>, a, st);
}

template <typename T>
void launch_op(const LaunchArgs& a, DevStream st) {
  switch (a.op) {
    case kOpSum: launch_typed<T, kOpSum>(a, st); break;
    case kOpMax: launch_typed<T, kOpMax>(a, st); break;
    case kOpMin: launch_typed<T, kOpMin>(a, st); break;
    case kOpProd: launch_typed<T, kOpProd>(a, st); break;
    case kOpAvg: launch_typed<T, kOpAvg>(a, st); break;
    default:
      throw InvalidArgument(common::format("allreduce: unknown reduce op code {}", a.op));
  }
}

}  // namespace

void launch_allreduce(const LaunchArgs& a, void* stream) {
  if (a.blocks < 1 || a.blocks > kMaxBlocks || a.threads < kWarpSize || a.threads > 1024)
    throw InvalidArgument(common::format("allreduce launch: blocks {} (1..{}), threads {} ({}..1024)", a.blocks,
                                         kMaxBlocks, a.threads, kWarpSize));
  if (a.split.steps == 0) return;
  DevStream st = static_cast<DevStream>(stream);
  if (a.ll128) {
    launch_ll128(a, st);
  } else if (oneshot_fits(a)) {
    launch_oneshot(a, st);
  } else {
    bool known = with_type(a.dtype, [&](auto t) { launch_op<decltype(t)>(a, st); });
    if (!known) throw InvalidArgument(common::format("allreduce: unknown dtype code {}", a.dtype));
  }
  gpu::dev::check_launch("allreduce kernel launch");  // GpuError: error string, code and device
}

}  // namespace peerlink::coll
