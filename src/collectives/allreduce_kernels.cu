// Allreduce kernels (CUDA and HIP from one source). Data flow and flag protocol: see layout.h.
// One kernel runs all steps (chunks) of a call; block b of every rank exchanges data and flags only
// with block b of the peers, so blocks pipeline independently without any grid-wide barrier.
// Everything remote is a store (data pushed into the peer's scratch, flags pushed into the peer's
// inbox); every spin reads local memory and is bounded by a device clock.
#include "collectives/device_compat.h"
#include "collectives/device_launch.h"
#include "collectives/reduce_ops.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::coll {
namespace {

template <typename T>
struct Elems {
  static constexpr int kVec = 16 / sizeof(T);
};

// outs[o][i] = reduce(ins[0][i], ..., ins[nin-1][i]) for i < n, by the threads of one block.
// ins[0] may be the caller's buffer; the others are scratch rewritten by peers (fresh loads).
// With nin == 1 the bytes move unchanged (no conversion, NaN payloads kept).
template <typename T, int Op>
__device__ void reduce_block(const T* const* ins, int nin, T* const* outs, int nout, size_t n) {
  using A = Acc<T>;
  using AccT = typename A::type;
  constexpr int V = Elems<T>::kVec;
  bool aligned = true;
  for (int i = 0; i < nin; ++i) aligned &= (reinterpret_cast<uintptr_t>(ins[i]) & 15) == 0;
  for (int o = 0; o < nout; ++o) aligned &= (reinterpret_cast<uintptr_t>(outs[o]) & 15) == 0;
  size_t nvec = aligned ? n / V : 0;
  for (size_t u = threadIdx.x; u < nvec; u += blockDim.x) {
    Pack16 p = load_fresh(reinterpret_cast<const Pack16*>(ins[0]) + u);
    if (nin > 1) {
      T v[V];
      AccT acc[V];
      memcpy(v, &p, 16);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] = A::in(v[j]);
      for (int r = 1; r < nin; ++r) {
        Pack16 q = load_fresh(reinterpret_cast<const Pack16*>(ins[r]) + u);
        memcpy(v, &q, 16);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = Apply<Op>::run(acc[j], A::in(v[j]));
      }
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = A::out(acc[j]);
      memcpy(&p, v, 16);
    }
    for (int o = 0; o < nout; ++o) reinterpret_cast<Pack16*>(outs[o])[u] = p;
  }
  for (size_t e = nvec * V + threadIdx.x; e < n; e += blockDim.x) {
    T x = load_fresh_scalar(ins[0] + e);
    if (nin > 1) {
      AccT acc = A::in(x);
      for (int r = 1; r < nin; ++r) acc = Apply<Op>::run(acc, A::in(load_fresh_scalar(ins[r] + e)));
      x = A::out(acc);
    }
    for (int o = 0; o < nout; ++o) outs[o][e] = x;
  }
}

// After the block's stores: announce `seq` for (phase, block) to every peer.
__device__ void signal_peers(const LaunchArgs& a, int phase, uint64_t seq) {
  __syncthreads();
  int p = threadIdx.x;
  if (p < a.world && p != a.rank) {
    __threadfence_system();  // our data stores (to peers and locally) before the flag
    volatile uint64_t* f = &a.flags[p]->inbox[phase][blockIdx.x][a.rank];
    *f = seq;
  }
}

// Waits until every peer announced >= seq for (phase, block). False when a wait ran out (recorded in
// the error word and the local abort word) or another block already gave up.
__device__ bool wait_peers(const LaunchArgs& a, int phase, uint64_t seq) {
  __shared__ int s_failed;
  if (threadIdx.x == 0) s_failed = 0;
  __syncthreads();
  int p = threadIdx.x;
  FlagArea* mine = a.flags[a.rank];
  if (p < a.world && p != a.rank) {
    volatile uint64_t* f = &mine->inbox[phase][blockIdx.x][p];
    volatile uint32_t* abort = &mine->abort;
    if (*f < seq) {
      uint64_t t0 = now_ns();
      uint32_t spins = 0;
      while (*f < seq) {
        if ((++spins & 255) == 0) {
          if (*abort) {
            s_failed = 1;
            break;
          }
          if (now_ns() - t0 > a.timeout_ns) {
            uint32_t code = kErrTimeout | (uint32_t(p) << 8) | (uint32_t(a.rank) << 16);
            volatile uint32_t* err = a.error;
            if (*err == 0) *err = code;  // first reporter wins (races only pick which code stays)
            *abort = 1;
            s_failed = 1;
            break;
          }
        }
      }
    }
    __threadfence_system();  // acquire: the peer's data is read after its flag
  }
  __syncthreads();
  return s_failed == 0;
}

// Bounded to 1024 threads so every instantiation fits the register file at the bandwidth grid
// (without it some types need 72 registers and a 1024-thread launch fails).
template <typename T, int Op, bool OneShot>
__global__ void __launch_bounds__(1024) allreduce_kernel(LaunchArgs a) {
  __shared__ uint64_t s_seq;
  __shared__ uint32_t s_abort;
  FlagArea* mine = a.flags[a.rank];
  const int b = blockIdx.x;
  if (threadIdx.x == 0) {
    s_abort = *reinterpret_cast<volatile uint32_t*>(&mine->abort);
    s_seq = *reinterpret_cast<volatile uint64_t*>(&mine->counter[b]);
  }
  __syncthreads();
  if (s_abort) return;  // an earlier call timed out: the host reports it, do not wait again
  const uint64_t seq0 = s_seq;
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
  if (!ok) return;
  __syncthreads();
  // Every block's counter advances by the same amount, including blocks this grid did not launch,
  // so the next call (any grid size) starts from one sequence number on every block.
  const uint64_t last = seq0 + s.steps;
  if (threadIdx.x == 0) mine->counter[b] = last;
  if (b == 0)
    for (int j = gridDim.x + threadIdx.x; j < kMaxBlocks; j += blockDim.x) mine->counter[j] = last;
}


// ---- one-shot through LL lines (small messages, one step) ------------------------------------
// Each thread owns 8-byte words of the message: it pushes its words (with the step's flag) into
// every peer's LL area, then polls its own LL area for the same words of every rank and reduces
// them in rank order. No barrier, no fence, no separate flag: latency is one NVLink write.

// 8 data bytes of word w (zero-padded past the end; byte loads when misaligned).
__device__ __forceinline__ uint64_t load_word(const char* p, size_t w, size_t bytes, bool aligned) {
  size_t off = w * 8;
  if (aligned && off + 8 <= bytes) return *reinterpret_cast<const uint64_t*>(p + off);
  uint64_t v = 0;
  for (size_t i = 0; off + i < bytes && i < 8; ++i) v |= uint64_t(static_cast<unsigned char>(p[off + i])) << (8 * i);
  return v;
}
__device__ __forceinline__ void store_word(char* p, size_t w, size_t bytes, bool aligned, uint64_t v) {
  size_t off = w * 8;
  if (aligned && off + 8 <= bytes) {
    *reinterpret_cast<uint64_t*>(p + off) = v;
    return;
  }
  for (size_t i = 0; off + i < bytes && i < 8; ++i) p[off + i] = static_cast<char>(v >> (8 * i));
}

template <typename T, int Op>
__global__ void __launch_bounds__(1024) oneshot_ll_kernel(LaunchArgs a) {
  __shared__ uint64_t s_seq;
  __shared__ uint32_t s_abort;
  FlagArea* mine = a.flags[a.rank];
  const int b = blockIdx.x;
  if (threadIdx.x == 0) {
    s_abort = *reinterpret_cast<volatile uint32_t*>(&mine->abort);
    s_seq = *reinterpret_cast<volatile uint64_t*>(&mine->counter[b]);
  }
  __syncthreads();
  if (s_abort) return;
  const uint64_t seq = s_seq + 1;
  const uint32_t flag = uint32_t(seq);
  const int slot = int(seq & 1);
  const int me = a.rank, n = a.world;
  const DataLayout& L = a.layout;
  const char* src = static_cast<const char*>(a.src);
  char* dst = static_cast<char*>(a.dst);
  const size_t bytes = a.split.count * sizeof(T);
  const size_t nwords = (bytes + 7) / 8;
  const bool aligned = ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 7) == 0;
  size_t w0 = size_t(b) * a.ll_words_per_block, w1 = w0 + a.ll_words_per_block;
  if (w1 > nwords) w1 = nwords;
  for (size_t w = w0 + threadIdx.x; w < w1; w += blockDim.x) {
    uint64_t v = load_word(src, w, bytes, aligned);
    for (int p = 0; p < n; ++p)
      if (p != me) store_ll(a.data[p] + L.ll(slot, me) + w * 16, uint32_t(v), uint32_t(v >> 32), flag);
  }
  using A = Acc<T>;
  constexpr int E = 8 / sizeof(T);
  bool ok = true;
  for (size_t w = w0 + threadIdx.x; w < w1 && ok; w += blockDim.x) {
    typename A::type acc[E];
    for (int r = 0; r < n && ok; ++r) {
      uint64_t v;
      if (r == me) {
        v = load_word(src, w, bytes, aligned);
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
                volatile uint32_t* err = a.error;
                if (*err == 0) *err = kErrTimeout | (uint32_t(r) << 8) | (uint32_t(me) << 16);
                *abort = 1;
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
    for (int j = 0; j < E; ++j) out[j] = A::out(acc[j]);
    uint64_t v;
    memcpy(&v, out, 8);
    store_word(dst, w, bytes, aligned, v);
  }
  __syncthreads();
  if (threadIdx.x == 0) mine->counter[b] = seq;
  if (b == 0)
    for (int j = gridDim.x + threadIdx.x; j < kMaxBlocks; j += blockDim.x) mine->counter[j] = seq;
}

template <typename T, int Op>
void launch_typed(const LaunchArgs& a, DevStream st) {
  if (a.ll)
    oneshot_ll_kernel<T, Op><<<a.blocks, a.threads, 0, st>>>(a);
  else if (a.one_shot)
    allreduce_kernel<T, Op, true><<<a.blocks, a.threads, 0, st>>>(a);
  else
    allreduce_kernel<T, Op, false><<<a.blocks, a.threads, 0, st>>>(a);
}

template <typename T>
void launch_op(const LaunchArgs& a, DevStream st) {
  switch (a.op) {
    case kOpSum: launch_typed<T, kOpSum>(a, st); break;
    case kOpMax: launch_typed<T, kOpMax>(a, st); break;
    case kOpMin: launch_typed<T, kOpMin>(a, st); break;
    case kOpProd: launch_typed<T, kOpProd>(a, st); break;
    default: throw InvalidArgument(common::cat("allreduce: unknown reduce op code ", a.op));
  }
}

}  // namespace

void launch_allreduce(const LaunchArgs& a, void* stream) {
  if (a.blocks < 1 || a.blocks > kMaxBlocks || a.threads < kWarpSize || a.threads > 1024)
    throw InvalidArgument(common::cat("allreduce launch: blocks ", a.blocks, " (1..", kMaxBlocks,
                                      "), threads ", a.threads, " (", kWarpSize, "..1024)"));
  if (a.split.steps == 0) return;
  DevStream st = static_cast<DevStream>(stream);
  bool known = with_type(a.dtype, [&](auto t) { launch_op<decltype(t)>(a, st); });
  if (!known) throw InvalidArgument(common::cat("allreduce: unknown dtype code ", a.dtype));
  DevError e = PL_DEV_GET_LAST_ERROR();
  if (e != PL_DEV_SUCCESS)
    throw Error(common::cat("allreduce kernel launch failed: ", PL_DEV_ERROR_STRING(e), " (", int(e), ")"));
}

}  // namespace peerlink::coll
