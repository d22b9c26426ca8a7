// Device helpers of the stream-ordered engine's kernels (one translation unit: stream_kernels.cu and
// the per-form device headers it includes, stream_pub/raw/ce_device.h):
// the launch context, error recording and the pair abort, bounded flag waits, the block copy and
// the channel exit (the LL line format: stream_ll_device.h). Kept apart so each file stays small;
// see stream_kernels.cu for the memory-ordering rules they follow.
#pragma once
#include "gpu/device.h"
#include "stream/stream_launch.h"

namespace peerlink::stream {
namespace {  // one translation unit includes this

using gpu::dev::fence_acq_rel_system;
using gpu::dev::fence_system;
using gpu::dev::load_volatile_16;
using gpu::dev::store_volatile_16;
using gpu::dev::now_ns;
using gpu::dev::pdl_launch_dependents;
using gpu::dev::pdl_wait;
using gpu::dev::store_release_system;
__device__ __forceinline__ uint64_t load_volatile(const uint64_t* p) { return *reinterpret_cast<const volatile uint64_t*>(p); }

constexpr int kThreads = kStreamThreads;

// Slot counts and chunk sizes are powers of two (static_asserts in stream_p2p.cpp; a peer's area
// must match ours), so the kernels need no division by a runtime value (nvcc emits a 32-bit
// divide with a 64-bit fallback, tens of dependent instructions each). One-GPU stand-in, graph,
// 8 B-4 KB (three runs): NCCL form -0.45 us sendrecv, -0.4 ping-pong one-way
// (8 B 3.32-3.36 / 3.02-3.05 -> 2.86-2.89 / 2.59-2.65 us); published form -0.15 / -0.2 (the
// ll_range division at nb == 1).
__device__ __forceinline__ uint64_t mod_pow2(uint64_t x, uint64_t m) { return x & (m - 1); }

struct Ctx {
  const StreamLaunchHeader* L;
  const DevOp* ops;  // the launch's ops (its parameter block)
  const DevChannel* chs;  // the launch's channels
  const DevChannel* c;
  uint64_t* abort;  // c->mine->error.v: set once the pair failed
  int blk;          // this block's index among the channel's blocks
  int nb;           // the channel's blocks
};

__device__ void record_error(const Ctx& x, uint32_t code) {
  volatile uint32_t* err = x.L->error;
  if (*err == 0) *err = code | (uint32_t(x.c->peer) << 8);
  __threadfence_system();
}

// The pair failed earlier (here or on the peer): never wait again; make sure the host hears of it.
__device__ bool stop_if_aborted(const Ctx& x, uint64_t aborted) {
  if (!aborted) return false;
  if (threadIdx.x == 0) record_error(x, kErrAborted);
  return true;
}

// Stops the pair on both sides: our abort word, and the peer's for this pair (its kernels stop
// waiting on us at once and report kErrAborted instead of running into their timeout).
__device__ void abort_pair(const Ctx& x) {
  *reinterpret_cast<volatile uint64_t*>(x.abort) = 1;
  *reinterpret_cast<volatile uint64_t*>(&x.c->remote->error.v) = 1;
  __threadfence_system();
}

// After a relaxed spin saw the peer's flag *f: orders this thread's later accesses after the peer's
// accesses before its release store (Options::stream_acquire_load: one ld.acquire.sys of the flag,
// which reads that store or a later one of the same writer; else fence.acq_rel.sys).
#if !defined(PEERLINK_HIP)
__device__ __forceinline__ uint64_t load_acquire_sys(const uint64_t* f) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(f) : "memory");
  return v;
}
#endif
__device__ __forceinline__ void acquire(const Ctx& x, const uint64_t* f) {
#if !defined(PEERLINK_HIP)
  if (x.L->acq_load) return void(load_acquire_sys(f));
#endif
  fence_acq_rel_system();
}

// A spin's periodic check: true (recorded; on timeout the pair aborts too) when the pair was aborted
// or the wait began more than Options::timeout before (t0 from now_ns()).
__device__ __forceinline__ bool wait_failed(const Ctx& x, uint64_t t0) {
  if (load_volatile(x.abort)) {
    record_error(x, kErrAborted);  // no-op when this side's failure is already recorded
    return true;
  }
  if (now_ns() - t0 > x.L->timeout_ns) {
    record_error(x, kErrTimeout);
    abort_pair(x);
    return true;
  }
  return false;
}

// Thread 0: waits until *f >= target. False on timeout (recorded; the pair aborts) or abort.
__device__ bool wait_ge(const Ctx& x, const uint64_t* f, uint64_t target) {
  if (load_volatile(f) >= target) return true;
  uint64_t t0 = now_ns();
  for (uint32_t n = 1;; ++n) {
    if (load_volatile(f) >= target) return true;
    if ((n & 127) == 0 && wait_failed(x, t0)) return false;
  }
}

// Thread 0: wait_ge, then acquire(f). With Options::stream_acquire_load the first probe is the
// ld.acquire.sys itself: when the flag is already there (the common case: a credit or a post that
// came long before), one load instead of a relaxed load followed by an acquire load, which cost a
// serial memory latency at the start of every send (8 B one-way, one-GPU proxy: see
// benchmarks/results).
__device__ bool wait_ge_acquire(const Ctx& x, const uint64_t* f, uint64_t target) {
#if !defined(PEERLINK_HIP)
  if (x.L->acq_load && load_acquire_sys(f) >= target) return true;
#endif
  if (!wait_ge(x, f, target)) return false;
  acquire(x, f);
  return true;
}

// Thread 0: an LL ring credit, waited for without an acquire. The hazard a credit guards is the
// receiver's reads and zeroing of a slot (write-after-read, write-after-write) against our next
// stores into it: the receiver releases the count only after those accesses, and our stores are
// issued only after our load returned that count (they depend on it; a GPU makes no store visible
// speculatively). NCCL's LL sender waits on its head counter the same way (a volatile load, no
// fence). Published form, one-GPU stand-in, graph, A/B (three runs):
// -0.08 to -0.1 us sendrecv, -0.12 to -0.15 us ping-pong one-way at 8 B-512 B, -0.06 / -0.08 at
// 4 KB, unchanged from 32 KB. The NCCL form's LL pieces measured slower with it in the same runs
// (+0.07 us ping-pong at 8 B, +0.25 at 32 KB), so send_raw keeps wait_ge_acquire.
__device__ __forceinline__ bool wait_credit(const Ctx& x, const uint64_t* f, uint64_t target) {
  return wait_ge(x, f, target);
}

__device__ __forceinline__ uint4 load16(const uint4* p, bool fresh) {
#if defined(PEERLINK_HIP)
  if (!fresh) return *p;
  uint64_t lo, hi;
  gpu::dev::load_l2_16(p, lo, hi);  // two volatile 8-byte loads on HIP
  uint4 v;
  v.x = uint32_t(lo);
  v.y = uint32_t(lo >> 32);
  v.z = uint32_t(hi);
  v.w = uint32_t(hi >> 32);
  return v;
#else
  return fresh ? __ldcg(p) : *p;
#endif
}

// Copy of n bytes by blocks [part, part + parts) of a channel's blocks (each block takes every
// parts-th 16-byte vector; parts = 1: the whole block copies everything). `fresh`: src is rewritten
// by a peer (read through L2, not L1). Four independent 16-byte loads per thread are in flight
// before their stores, so one block keeps ~32 KB of NVLink writes outstanding.
__device__ void part_copy(char* dst, const char* src, uint64_t n, bool fresh, int part, int parts) {
  uint64_t head = 0;
  const uint64_t stride = uint64_t(parts) * blockDim.x;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
    const uint64_t n16 = n / 16;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    uint64_t i = uint64_t(part) * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
      uint4 v0 = load16(s + i, fresh), v1 = load16(s + i + stride, fresh);
      uint4 v2 = load16(s + i + 2 * stride, fresh), v3 = load16(s + i + 3 * stride, fresh);
      d[i] = v0;
      d[i + stride] = v1;
      d[i + 2 * stride] = v2;
      d[i + 3 * stride] = v3;
    }
    for (; i < n16; i += stride) d[i] = load16(s + i, fresh);
    head = n16 * 16;
  }
  for (uint64_t i = head + uint64_t(part) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = fresh ? *reinterpret_cast<const volatile char*>(src + i) : src[i];
}

// Thread 0 of each of the channel's blocks, after a __syncthreads that follows the block's stores
// of one message: true for the last block to get here (every block's stores are then visible to it,
// acquired), which publishes the message. `arrive` is the message's count in this rank's area (a
// ring entry): the last block resets it, and the caller's ring guarantees that no block counts for
// the entry's next message before the publication it is about to make was seen.
__device__ bool last_to_arrive(const Ctx& x, uint64_t* arrive) {
  if (x.nb == 1) return true;
  // Our block's NVLink stores (ordered before this thread by the barrier) are visible system-wide
  // before the count says so; the last block's acquire below then orders them before its flag.
  fence_system();
  unsigned long long* a = reinterpret_cast<unsigned long long*>(arrive);
  if (atomicAdd(a, 1ull) != uint64_t(x.nb - 1)) return false;
  atomicExch(a, 0ull);
  fence_acq_rel_system();
  return true;
}

// Every block of the channel calls this once when it leaves (after its __syncthreads); the last one
// runs `last` (writes the channel's counters: every block has read them by then) and re-arms the
// exit count for the next launch.
template <typename Last>
__device__ void channel_exit(const Ctx& x, Last&& last) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  uint64_t* e = &x.c->mine->exit[x.c->kind].v;
  if (x.nb == 1 || atomicAdd(reinterpret_cast<unsigned long long*>(e), 1ull) == uint64_t(x.nb - 1)) {
    last();
    if (x.nb > 1) atomicExch(reinterpret_cast<unsigned long long*>(e), 0ull);
  }
}

}  // namespace
}  // namespace peerlink::stream
