// Kernels of the zero-copy path (coll_zero_copy.cpp): the entry step that also compares the ranks'
// tags, and the copy kernel that pushes this rank's pieces straight into the peers' recvbufs.
#include "collectives/coll_launch.h"
#include "collectives/device_compat.h"
#include "collectives/device_reduce.h"
#include "collectives/device_sync.h"
#include "collectives/reduce_ops.h"
#include "common/format.h"
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

// Blocks [0, push_blocks) take the pushes (remote, over the link), blocks [push_blocks, gridDim.x)
// this rank's own piece (local memory), so the two run side by side. The push blocks are dealt out
// over the copies (block b takes copy b % n), so a rank writes every peer at once: when every
// block strode over copy 0 first, every rank's copy 0 went to rank 0 (or rank 1) at the same time,
// and 4x H200 all_gather 128 MB took 465 us against NCCL's 300.
__global__ void __launch_bounds__(1024) coll_zc_copy_kernel(ZcCopyArgs c) {
  const bool own = int(blockIdx.x) >= c.push_blocks;
  int b = own ? int(blockIdx.x) - c.push_blocks : int(blockIdx.x);
  int nb = own ? int(gridDim.x) - c.push_blocks : c.push_blocks;
  if (own) {
    const size_t t = size_t(b) * blockDim.x + threadIdx.x, stride = size_t(nb) * blockDim.x;
    return copy_bytes(c.own_to, c.own_from, c.own_bytes, t, stride);
  }
  int i0 = 0, i1 = c.n;
  if (c.n > 1 && c.push_blocks >= c.n) {  // one copy per block
    i0 = b % c.n;
    i1 = i0 + 1;
    nb = (c.push_blocks - i0 + c.n - 1) / c.n;
    b /= c.n;
  }
  const size_t t = size_t(b) * blockDim.x + threadIdx.x, stride = size_t(nb) * blockDim.x;
  for (int i = i0; i < i1; ++i) {
    if (c.swap) swap_bytes(c.local[i], c.to[i], c.bytes[i], t, stride);
    else copy_bytes(c.to[i], c.from[i], c.bytes[i], t, stride);
  }
}

// ---- the relay (broadcast on 3+ ranks; coll_launch.h, ZcRelayArgs) ----------------------------
// s (n bytes) into to[i] + off for every i < nd, each unit loaded once: four 16-byte loads in
// flight per thread, as copy_units.
template <typename V>
__device__ __forceinline__ void fan_units(char* const* to, int nd, size_t off, const V* s, size_t n, size_t t,
                                          size_t stride) {
  size_t k = t;
  for (; k + 3 * stride < n; k += 4 * stride) {
    V a0 = s[k], a1 = s[k + stride], a2 = s[k + 2 * stride], a3 = s[k + 3 * stride];
    for (int i = 0; i < nd; ++i) {
      V* d = reinterpret_cast<V*>(to[i] + off);
      d[k] = a0;
      d[k + stride] = a1;
      d[k + 2 * stride] = a2;
      d[k + 3 * stride] = a3;
    }
  }
  for (; k < n; k += stride) {
    const V v = s[k];
    for (int i = 0; i < nd; ++i) reinterpret_cast<V*>(to[i] + off)[k] = v;
  }
}
__device__ void fan_bytes(char* const* to, int nd, size_t off, const char* s, size_t n) {
  const size_t t = threadIdx.x, stride = blockDim.x;
  uintptr_t al = reinterpret_cast<uintptr_t>(s);
  for (int i = 0; i < nd; ++i) al |= reinterpret_cast<uintptr_t>(to[i] + off);
  size_t done = 0;
  if ((al & 15) == 0) {
    done = n / 16 * 16;
    fan_units(to, nd, off, reinterpret_cast<const uint4*>(s), n / 16, t, stride);
  } else if ((al & 7) == 0) {
    done = n / 8 * 8;
    fan_units(to, nd, off, reinterpret_cast<const uint64_t*>(s), n / 8, t, stride);
  }
  fan_units(to, nd, off + done, reinterpret_cast<const unsigned char*>(s) + done, n - done, t, stride);
}

// Thread 0 waits for the root's flag of chunk j (>= seq, the call's entry sequence number), then
// the block reads the chunk. False when the wait ran out (recorded) or the pair aborted.
__device__ bool wait_chunk(const LaunchArgs& a, int root, size_t j, uint64_t seq) {
  __shared__ int s_ok;
  if (threadIdx.x == 0) {
    const bool ok = wait_flag_ge(a, &a.flags[a.rank]->inbox[1][j][root], seq, root);
    fence_acquire();
    s_ok = ok ? 1 : 0;
  }
  __syncthreads();
  const int ok = s_ok;
  __syncthreads();  // read by all before thread 0 may rewrite it for the next chunk
  return ok != 0;
}

// The root: block b takes units u = b, b + push_blocks, ... in chunk-major order (chunk u / n of
// copy u % n), so every part advances together; after each unit thread 0 flags the chunk in the
// part owner's inbox (a system-scope release after the barrier that follows the block's stores).
// A non-root: block b forwards chunks j = b, b + push_blocks, ... of its part as their flags come.
// Blocks from push_blocks: the root's own copy (out of place). Counters are not advanced: the
// entry step's kernel_end set them to seq, and the exit step takes the next one.
__global__ void __launch_bounds__(1024) coll_zc_relay_kernel(LaunchArgs a, ZcRelayArgs r) {
  uint64_t seq;
  if (!kernel_begin(a, seq)) return;
  const int b = int(blockIdx.x);
  if (b >= r.push_blocks) {
    const size_t t = size_t(b - r.push_blocks) * blockDim.x + threadIdx.x;
    return copy_bytes(r.own_to, r.own_from, r.own_bytes, t, size_t(gridDim.x - r.push_blocks) * blockDim.x);
  }
  const size_t C = r.chunk;
  if (r.is_root) {
    size_t m = 0;
    for (int i = 0; i < r.n; ++i) m = (r.bytes[i] + C - 1) / C > m ? (r.bytes[i] + C - 1) / C : m;
    for (size_t u = size_t(b); u < m * size_t(r.n); u += size_t(r.push_blocks)) {
      const int i = int(u % size_t(r.n));
      const size_t j = u / size_t(r.n), off = j * C;
      if (off >= r.bytes[i]) continue;
      copy_bytes(r.to[i] + off, r.from[i] + off, r.bytes[i] - off < C ? r.bytes[i] - off : C, threadIdx.x, blockDim.x);
      __syncthreads();
      if (threadIdx.x == 0) flag_store_release(&a.flags[r.to_rank[i]]->inbox[1][j][a.rank], seq);
    }
    return;
  }
  if (r.n == 0) return;
  char* to[kMaxRanks];
  for (int i = 0; i < r.n; ++i) to[i] = r.to[i];
  const size_t m = (r.bytes[0] + C - 1) / C;
  for (size_t j = size_t(b); j < m; j += size_t(r.push_blocks)) {
    if (!wait_chunk(a, r.root, j, seq)) return;
    const size_t off = j * C;
    fan_bytes(to, r.n, off, r.from[0] + off, r.bytes[0] - off < C ? r.bytes[0] - off : C);
  }
}

// ---- the pulls (reduce, reduce_scatter; the zero-copy allreduce with extra_outs) -------------
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
  for (int o = 0; o < r.nextra; ++o) aligned &= (reinterpret_cast<uintptr_t>(r.extra_outs[o]) & 15) == 0;
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
    T* outs[kMaxRanks + 1] = {out + lo};
    for (int o = 0; o < r.nextra; ++o) outs[1 + o] = static_cast<T*>(r.extra_outs[o]) + lo;
    return reduce_block<T, Op>(in, r.nin, outs, 1 + r.nextra, m);
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
      for (int j = 0; j < V; ++j) v[j] = A::out(finish<Op>(acc[u][j], r.nin));
      memcpy(&p[u], v, 16);
      reinterpret_cast<Pack16*>(out)[k + u * stride] = p[u];
    }
    for (int o = 0; o < r.nextra; ++o)
#pragma unroll
      for (int u = 0; u < U; ++u) static_cast<Pack16*>(r.extra_outs[o])[k + u * stride] = p[u];
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
    for (int j = 0; j < V; ++j) v[j] = A::out(finish<Op>(acc[j], r.nin));
    memcpy(reinterpret_cast<Pack16*>(out) + k, v, 16);
    for (int o = 0; o < r.nextra; ++o) memcpy(static_cast<Pack16*>(r.extra_outs[o]) + k, v, 16);
  }
  for (size_t e = nvec * V + t; e < r.count; e += stride) {
    AccT acc = A::in(load_fresh_scalar(ins[0] + e));
    for (int i = 1; i < r.nin; ++i) acc = Apply<Op>::run(acc, A::in(load_fresh_scalar(ins[i] + e)));
    const T x = A::out(finish<Op>(acc, r.nin));
    out[e] = x;
    for (int o = 0; o < r.nextra; ++o) static_cast<T*>(r.extra_outs[o])[e] = x;
  }
}

}  // namespace

void preload_ce_kernels();  // coll_kernels.cu

void preload_multi_kernel_paths() {
  preload_ce_kernels();
  gpu::dev::preload(coll_zc_step_kernel);
  gpu::dev::preload(coll_zc_copy_kernel);
  gpu::dev::preload(coll_zc_relay_kernel);
  for (int t = kF32; t <= kI64; ++t)
    with_type(t, [&](auto ty) {
      for (int o = kOpSum; o <= kOpAvg; ++o)
        with_op(o, [&](auto op) { gpu::dev::preload(coll_zc_pull_kernel<decltype(ty), decltype(op)::value>); });
    });
}

void launch_zc_pull(const CeReduceArgs& r, void* stream) {
  if (r.nin < 1 || r.nin > kMaxRanks || r.nextra < 0 || r.nextra >= kMaxRanks || r.blocks < 1 || r.blocks > kMaxBlocks || r.per_block == 0)
    throw InvalidArgument(
        common::format("collective zero-copy pull: {} inputs, {} extra outputs, {} blocks, {} elements per block",
                       r.nin, r.nextra, r.blocks, r.per_block));
  DevStream st = static_cast<DevStream>(stream);
  bool known_op = true;
  bool known = with_type(r.dtype, [&](auto t) {
    known_op = with_op(r.op, [&](auto op) {
      gpu::dev::launch(coll_zc_pull_kernel<decltype(t), decltype(op)::value>, unsigned(r.blocks), 512u, st, false, r);
    });
  });
  if (!known || !known_op)
    throw InvalidArgument(
        common::format("collective zero-copy pull: unknown dtype code {} or op code {}", r.dtype, r.op));
  gpu::dev::check_launch("collective zero-copy pull launch");
}

void launch_zc_step(const LaunchArgs& a, uint64_t call_tag, void* stream) {
  if (a.world < 2 || a.world > kMaxRanks)
    throw InvalidArgument(common::format("collective zero-copy step: world {} (2..{})", a.world, kMaxRanks));
  gpu::dev::launch(coll_zc_step_kernel, 1u, unsigned(kWarpSize), static_cast<DevStream>(stream), false, a, call_tag);
  gpu::dev::check_launch("collective zero-copy step launch");
}

void launch_zc_relay(const LaunchArgs& a, const ZcRelayArgs& r, void* stream) {
  const int grid = r.push_blocks + (r.own_bytes ? r.own_blocks : 0);
  bool ok = r.n >= 0 && r.n < kMaxRanks && r.push_blocks >= 1 && r.own_blocks >= 1 && grid <= kMaxBlocks &&
            r.threads >= kWarpSize && r.threads <= 1024 && r.chunk >= 16 && r.chunk % 16 == 0;
  for (int i = 0; ok && i < r.n; ++i) ok = (r.bytes[i] + r.chunk - 1) / r.chunk <= kRelayMaxChunks;
  if (!ok)
    throw InvalidArgument(
        common::format("collective zero-copy relay: {} copies, {} + {} blocks of {} threads, chunk {}", r.n,
                       r.push_blocks, r.own_blocks, r.threads, r.chunk));
  gpu::dev::launch(coll_zc_relay_kernel, unsigned(grid), unsigned(r.threads), static_cast<DevStream>(stream), false, a,
                   r);
  gpu::dev::check_launch("collective zero-copy relay launch");
}

void launch_zc_copy(const ZcCopyArgs& c, void* stream) {
  const int grid = c.push_blocks + (c.own_bytes ? c.own_blocks : 0);
  if (c.n < 0 || c.n > kMaxRanks || c.push_blocks < 1 || c.own_blocks < 1 || grid > 2 * kMaxBlocks ||
      c.threads < kWarpSize || c.threads > 1024)
    throw InvalidArgument(common::format("collective zero-copy copy: {} copies, {} + {} blocks of {} threads", c.n,
                                         c.push_blocks, c.own_blocks, c.threads));
  if (c.n == 0 && c.own_bytes == 0) return;
  gpu::dev::launch(coll_zc_copy_kernel, unsigned(grid), unsigned(c.threads), static_cast<DevStream>(stream), false, c);
  gpu::dev::check_launch("collective zero-copy copy launch");
}

}  // namespace peerlink::coll
