// Kernels of the zero-copy path (coll_zero_copy.cpp): the entry step that also compares the ranks'
// tags, and the copy kernel that pushes this rank's pieces straight into the peers' recvbufs.
#include "collectives/coll_launch.h"
#include "collectives/device_compat.h"
#include "collectives/device_reduce.h"
#include "collectives/device_sync.h"
#include "collectives/reduce_ops.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::coll {
namespace {

// ---- entry step -----------------------------------------------------------------------------
// As the copy-engine step (coll_kernels.cu), and thread p < world first stores this rank's tag of
// the call (mixed with the step's sequence number) into rank p's zc_tag[rank]; signal_peers'
// barrier + release store publish it with the flag. After the wait, thread p compares rank p's tag
// with ours: a difference means rank p passed another window offset or shape (kErrWindowMismatch;
// the abort word makes the later steps bail out, and the host reports it on the next call).
__global__ void coll_zc_step_kernel(LaunchArgs a, uint64_t call_tag) {
  uint64_t seq0;
  if (!kernel_begin(a, seq0)) return;
  const uint64_t seq = seq0 + 1, tag = zc_step_tag(call_tag, seq);
  const int p = threadIdx.x;
  if (p < a.world && p != a.rank) a.flags[p]->zc_tag[a.rank] = tag;
  signal_peers(a, 0, seq);
  if (!wait_peers(a, 0, seq)) return;
  if (p < a.world && p != a.rank && *reinterpret_cast<volatile uint64_t*>(&a.flags[a.rank]->zc_tag[p]) != tag) {
    volatile uint32_t* err = a.error;
    if (*err == 0) *err = kErrWindowMismatch | (uint32_t(p) << 8) | (uint32_t(a.rank) << 16);
    *reinterpret_cast<volatile uint32_t*>(&a.flags[a.rank]->abort) = 1;
  }
  kernel_end(a, seq);
}

// ---- the pushes -----------------------------------------------------------------------------
// Every thread of the grid strides over each copy in turn: four 16-byte loads in flight before its
// four stores (remote stores are posted; what bounds a thread is its loads). Copies whose ends are
// not both 16-byte aligned go by 8 or 1 bytes; the tail below a 16-byte multiple by bytes.
template <typename V>
__device__ __forceinline__ void copy_units(V* d, const V* s, size_t n, size_t t, size_t stride) {
  size_t k = t;
  for (; k + 3 * stride < n; k += 4 * stride) {
    V a0 = s[k], a1 = s[k + stride], a2 = s[k + 2 * stride], a3 = s[k + 3 * stride];
    d[k] = a0;
    d[k + stride] = a1;
    d[k + 2 * stride] = a2;
    d[k + 3 * stride] = a3;
  }
  for (; k < n; k += stride) d[k] = s[k];
}

// d <- s (n bytes) by the threads t = 0..stride-1 of a set of blocks.
__device__ __forceinline__ void copy_bytes(char* d, const char* s, size_t n, size_t t, size_t stride) {
  const uintptr_t al = reinterpret_cast<uintptr_t>(d) | reinterpret_cast<uintptr_t>(s);
  size_t done;
  if ((al & 15) == 0) {
    done = n / 16 * 16;
    copy_units(reinterpret_cast<uint4*>(d), reinterpret_cast<const uint4*>(s), n / 16, t, stride);
  } else if ((al & 7) == 0) {
    done = n / 8 * 8;
    copy_units(reinterpret_cast<uint64_t*>(d), reinterpret_cast<const uint64_t*>(s), n / 8, t, stride);
  } else {
    done = n;
    copy_units(reinterpret_cast<unsigned char*>(d), reinterpret_cast<const unsigned char*>(s), n, t, stride);
  }
  for (size_t k = done + t; k < n; k += stride) d[k] = s[k];
}

// ---- the swaps (all_to_all in place) -----------------------------------------------------------
// x[k] <-> y[k] for k < n, y in the peer's window: every element pair belongs to one thread of one
// rank (coll_zero_copy.cpp splits each pair of blocks between the two ranks), which loads both
// before it stores either, so nothing is overwritten before it was read. Four remote loads in
// flight per thread, as copy_units; the remote ones bypass L1 (the peer rewrites its buffer
// between calls).
template <typename V>
__device__ __forceinline__ V load_remote(const V* p) {
  if constexpr (sizeof(V) == 16) return load_fresh(p);
  else return load_fresh_scalar(p);
}
template <typename V>
__device__ __forceinline__ void swap_units(V* x, V* y, size_t n, size_t t, size_t stride) {
  size_t k = t;
  for (; k + 3 * stride < n; k += 4 * stride) {
    V b0 = load_remote(y + k), b1 = load_remote(y + k + stride), b2 = load_remote(y + k + 2 * stride),
      b3 = load_remote(y + k + 3 * stride);
    V a0 = x[k], a1 = x[k + stride], a2 = x[k + 2 * stride], a3 = x[k + 3 * stride];
    y[k] = a0;
    y[k + stride] = a1;
    y[k + 2 * stride] = a2;
    y[k + 3 * stride] = a3;
    x[k] = b0;
    x[k + stride] = b1;
    x[k + 2 * stride] = b2;
    x[k + 3 * stride] = b3;
  }
  for (; k < n; k += stride) {
    V b = load_remote(y + k), a = x[k];
    y[k] = a;
    x[k] = b;
  }
}

__device__ __forceinline__ void swap_bytes(char* x, char* y, size_t n, size_t t, size_t stride) {
  const uintptr_t al = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y);
  size_t done;
  if ((al & 15) == 0) {
    done = n / 16 * 16;
    swap_units(reinterpret_cast<Pack16*>(x), reinterpret_cast<Pack16*>(y), n / 16, t, stride);
  } else if ((al & 7) == 0) {
    done = n / 8 * 8;
    swap_units(reinterpret_cast<uint64_t*>(x), reinterpret_cast<uint64_t*>(y), n / 8, t, stride);
  } else {
    done = n;
    swap_units(reinterpret_cast<unsigned char*>(x), reinterpret_cast<unsigned char*>(y), n, t, stride);
  }
  swap_units(reinterpret_cast<unsigned char*>(x) + done, reinterpret_cast<unsigned char*>(y) + done, n - done, t,
             stride);
}

// Blocks [0, push_blocks) stride over the pushes (remote, over the link), blocks [push_blocks,
// gridDim.x) over this rank's own piece (local memory), so the two run side by side.
__global__ void __launch_bounds__(1024) coll_zc_copy_kernel(ZcCopyArgs c) {
  const bool own = int(blockIdx.x) >= c.push_blocks;
  const int b = own ? int(blockIdx.x) - c.push_blocks : int(blockIdx.x);
  const int nb = own ? int(gridDim.x) - c.push_blocks : c.push_blocks;
  const size_t t = size_t(b) * blockDim.x + threadIdx.x, stride = size_t(nb) * blockDim.x;
  if (own) return copy_bytes(c.own_to, c.own_from, c.own_bytes, t, stride);
  for (int i = 0; i < c.n; ++i) {
    if (c.swap) swap_bytes(c.local[i], c.to[i], c.bytes[i], t, stride);
    else copy_bytes(c.to[i], c.from[i], c.bytes[i], t, stride);
  }
}

// ---- the pulls (reduce, reduce_scatter) ------------------------------------------------------
// out = op over ins[0..nin) in rank order, the peers' inputs read in place over the link. Every
// thread keeps U 16-byte loads of one input in flight before it reduces them (a remote load takes
// about a microsecond: one at a time per thread left the link idle; reduce_block of the copy-engine
// path, one load per input per pass, measured 784 us for a 256 MB reduce against the push path's
// 753). Fresh loads: a peer's sendbuf changes between calls. Unaligned buffers: reduce_block.
template <typename T, int Op>
__global__ void __launch_bounds__(1024) coll_zc_pull_kernel(CeReduceArgs r) {
  using A = Acc<T>;
  using AccT = typename A::type;
  constexpr int V = Elems<T>::kVec, U = 4;
  const T* ins[kMaxRanks];
  bool aligned = (reinterpret_cast<uintptr_t>(r.out) & 15) == 0;
  for (int i = 0; i < r.nin; ++i) {
    ins[i] = static_cast<const T*>(r.ins[i]);
    aligned &= (reinterpret_cast<uintptr_t>(ins[i]) & 15) == 0;
  }
  T* out = static_cast<T*>(r.out);
  if (!aligned) {  // one block's worth each, as the copy-engine path splits it
    const size_t lo = size_t(blockIdx.x) * r.per_block;
    if (lo >= r.count) return;
    const size_t m = r.count - lo < r.per_block ? r.count - lo : r.per_block;
    const T* in[kMaxRanks];
    for (int i = 0; i < r.nin; ++i) in[i] = ins[i] + lo;
    T* outs[1] = {out + lo};
    return reduce_block<T, Op>(in, r.nin, outs, 1, m);
  }
  const size_t nvec = r.count / V, t = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  auto unpack = [](const Pack16& p, T* v) { memcpy(v, &p, 16); };
  size_t k = t;
  for (; k + (U - 1) * stride < nvec; k += U * stride) {
    AccT acc[U][V];
    Pack16 p[U];
#pragma unroll
    for (int u = 0; u < U; ++u) p[u] = load_fresh(reinterpret_cast<const Pack16*>(ins[0]) + k + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      T v[V];
      unpack(p[u], v);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[u][j] = A::in(v[j]);
    }
    for (int i = 1; i < r.nin; ++i) {
#pragma unroll
      for (int u = 0; u < U; ++u) p[u] = load_fresh(reinterpret_cast<const Pack16*>(ins[i]) + k + u * stride);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        T v[V];
        unpack(p[u], v);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[u][j] = Apply<Op>::run(acc[u][j], A::in(v[j]));
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      T v[V];
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = A::out(acc[u][j]);
      memcpy(&p[u], v, 16);
      reinterpret_cast<Pack16*>(out)[k + u * stride] = p[u];
    }
  }
  for (; k < nvec; k += stride) {
    T v[V];
    AccT acc[V];
    unpack(load_fresh(reinterpret_cast<const Pack16*>(ins[0]) + k), v);
    for (int j = 0; j < V; ++j) acc[j] = A::in(v[j]);
    for (int i = 1; i < r.nin; ++i) {
      unpack(load_fresh(reinterpret_cast<const Pack16*>(ins[i]) + k), v);
      for (int j = 0; j < V; ++j) acc[j] = Apply<Op>::run(acc[j], A::in(v[j]));
    }
    for (int j = 0; j < V; ++j) v[j] = A::out(acc[j]);
    memcpy(reinterpret_cast<Pack16*>(out) + k, v, 16);
  }
  for (size_t e = nvec * V + t; e < r.count; e += stride) {
    AccT acc = A::in(load_fresh_scalar(ins[0] + e));
    for (int i = 1; i < r.nin; ++i) acc = Apply<Op>::run(acc, A::in(load_fresh_scalar(ins[i] + e)));
    out[e] = A::out(acc);
  }
}

}  // namespace

void launch_zc_pull(const CeReduceArgs& r, void* stream) {
  if (r.nin < 1 || r.nin > kMaxRanks || r.blocks < 1 || r.blocks > kMaxBlocks || r.per_block == 0)
    throw InvalidArgument(common::cat("collective zero-copy pull: ", r.nin, " inputs, ", r.blocks, " blocks, ",
                                      r.per_block, " elements per block"));
  DevStream st = static_cast<DevStream>(stream);
  bool known_op = true;
  bool known = with_type(r.dtype, [&](auto t) {
    known_op = with_op(r.op, [&](auto op) {
      gpu::dev::launch(coll_zc_pull_kernel<decltype(t), decltype(op)::value>, unsigned(r.blocks), 512u, st, false, r);
    });
  });
  if (!known || !known_op)
    throw InvalidArgument(common::cat("collective zero-copy pull: unknown dtype code ", r.dtype, " or op code ", r.op));
  gpu::dev::check_launch("collective zero-copy pull launch");
}

void launch_zc_step(const LaunchArgs& a, uint64_t call_tag, void* stream) {
  if (a.world < 2 || a.world > kMaxRanks)
    throw InvalidArgument(common::cat("collective zero-copy step: world ", a.world, " (2..", kMaxRanks, ")"));
  gpu::dev::launch(coll_zc_step_kernel, 1u, unsigned(kWarpSize), static_cast<DevStream>(stream), false, a, call_tag);
  gpu::dev::check_launch("collective zero-copy step launch");
}

void launch_zc_copy(const ZcCopyArgs& c, void* stream) {
  const int grid = c.push_blocks + (c.own_bytes ? c.own_blocks : 0);
  if (c.n < 0 || c.n > kMaxRanks || c.push_blocks < 1 || c.own_blocks < 1 || grid > 2 * kMaxBlocks ||
      c.threads < kWarpSize || c.threads > 1024)
    throw InvalidArgument(common::cat("collective zero-copy copy: ", c.n, " copies, ", c.push_blocks, " + ",
                                      c.own_blocks, " blocks of ", c.threads, " threads"));
  if (c.n == 0 && c.own_bytes == 0) return;
  gpu::dev::launch(coll_zc_copy_kernel, unsigned(grid), unsigned(c.threads), static_cast<DevStream>(stream), false, c);
  gpu::dev::check_launch("collective zero-copy copy launch");
}

}  // namespace peerlink::coll
