// Device helpers of the stream-ordered engine's kernels (one translation unit: stream_kernels.cu and
// the per-form device headers it includes, stream_pub/raw/ce_device.h):
// the launch context, error recording and the pair abort, bounded flag waits, the block copy, and
// the LL line format with its reader. Kept apart so each file stays small; see stream_kernels.cu
// for the memory-ordering rules they follow.
#pragma once
#include "gpu/device.h"
#include "transport/stream_launch.h"

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
// 8 B-4 KB (session 9 call 6, three rounds): NCCL form -0.45 us sendrecv, -0.4 ping-pong one-way
// (8 B 3.32-3.36 / 3.02-3.05 -> 2.86-2.89 / 2.59-2.65 us); published form -0.15 / -0.2 (the
// ll_range division at nb == 1).
__device__ __forceinline__ uint64_t mod_pow2(uint64_t x, uint64_t m) { return x & (m - 1); }
__device__ __forceinline__ uint64_t div_up_pow2(uint64_t x, uint64_t m) { return (x + m - 1) >> (63 - __clzll(m)); }
constexpr uint64_t kRawLLOff = raw_ll_offset();  // constants, usable in device code
constexpr uint64_t kPubLLOff = pub_ll_offset();

struct Ctx {
  const StreamLaunchHeader* L;
  const DevOp* ops;  // the launch's ops (its parameter block)
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

// Thread 0: waits until *f >= target. False on timeout (recorded; the pair aborts) or abort.
__device__ bool wait_ge(const Ctx& x, const uint64_t* f, uint64_t target) {
  if (load_volatile(f) >= target) return true;
  uint64_t t0 = now_ns();
  for (uint32_t n = 1;; ++n) {
    if (load_volatile(f) >= target) return true;
    if ((n & 127) == 0) {
      if (load_volatile(x.abort)) {
        record_error(x, kErrAborted);  // no-op when this side's failure is already recorded
        return false;
      }
      if (now_ns() - t0 > x.L->timeout_ns) {
        record_error(x, kErrTimeout);
        abort_pair(x);
        return false;
      }
    }
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
// fence). Published form, one-GPU stand-in, graph, A/B (session 10 call 1, three rounds):
// -0.08 to -0.1 us sendrecv, -0.12 to -0.15 us ping-pong one-way at 8 B-512 B, -0.06 / -0.08 at
// 4 KB, unchanged from 32 KB. The NCCL form's LL pieces measured slower with it in the same call
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

// The LL flag of message (or NCCL-form chunk + 1) k: never 0 (a zeroed line never matches).
__device__ __forceinline__ uint32_t ll_flag(uint64_t k) { return uint32_t(k % 0xFFFFFFFFull) + 1; }

// Published form: ring slot of message k in section s (stride L.ll_slot).
__device__ __forceinline__ char* ll_slot(const Ctx& x, PairSection* s, uint64_t k) {
  return reinterpret_cast<char*>(s) + kPubLLOff + (k % kLLSlots) * x.L->ll_slot;
}
// NCCL form: the LL area of staging slot `slot`.
__device__ __forceinline__ char* raw_ll(PairSection* s, uint64_t slot) {
  return reinterpret_cast<char*>(s) + kRawLLOff + slot * kLLSlotBytes;
}

// Lines [l0, l1) of a message of `len` bytes split over `parts` blocks, `part` being this one.
__device__ __forceinline__ void ll_range(uint64_t len, int part, int parts, uint64_t& l0, uint64_t& l1) {
  const uint64_t lines = (len + 7) / 8;
  if (parts == 1) {  // the common case, without the division
    l0 = 0;
    l1 = lines;
    return;
  }
  const uint64_t per = (lines + uint64_t(parts) - 1) / uint64_t(parts);
  l0 = per * uint64_t(part) < lines ? per * uint64_t(part) : lines;
  l1 = l0 + per < lines ? l0 + per : lines;
}

// The thread's first data word of an LL write (line l0 + threadIdx.x of src's len bytes), loaded
// before the sender's credit is known, so that the two loads overlap: a whole aligned word only,
// in one load (else `have` is false and ll_write loads it).
struct FirstWord {
  uint64_t v = 0;
  bool have = false;
};
__device__ __forceinline__ FirstWord ll_first_word(const char* src, uint64_t len, uint64_t l0, uint64_t l1) {
  FirstWord w;
  const uint64_t i = l0 + threadIdx.x;
  if (i < l1 && (reinterpret_cast<uintptr_t>(src) & 7) == 0 && 8 * i + 8 <= len) {
    w.v = *reinterpret_cast<const uint64_t*>(src + 8 * i);
    w.have = true;
  }
  return w;
}

// All threads of the block: the header lines {h[0], f, h[1], f} {h[2], f, h[3], f} when `header`, then
// data lines [l0, l1) of src's `len` bytes as {lo, f, hi, f}. Plain volatile stores into the peer's
// memory: no fence, no flag. `first`: the thread's first line, when ll_first_word loaded it.
__device__ void ll_write(char* slot, const char* src, uint64_t len, uint32_t f, const uint32_t* h, bool header,
                         uint64_t l0, uint64_t l1, FirstWord first = {}) {
  if (header && threadIdx.x == 0) {
    store_volatile_16(slot, h[0], f, h[1], f);
    store_volatile_16(slot + 16, h[2], f, h[3], f);
  }
  const bool aligned = (reinterpret_cast<uintptr_t>(src) & 7) == 0;
  auto word = [&](uint64_t i) {
    uint64_t v = 0;
    if (aligned && 8 * i + 8 <= len) {
      v = *reinterpret_cast<const uint64_t*>(src + 8 * i);
    } else {
      for (uint64_t b = 8 * i; b < len && b < 8 * i + 8; ++b) v |= uint64_t(uint8_t(src[b])) << (8 * (b - 8 * i));
    }
    return v;
  };
  // Two lines per pass, both words loaded before either store (the volatile stores keep the
  // compiler from hoisting the next pass's load above them): a thread with two lines (every
  // message above 4 KB at 512 threads) waits for one source load latency, not two.
  // At most one line per thread (every message up to 4 KB at 512 threads): a single store. The
  // pair loop below cost those sizes 0.1 us on the stand-in (session 10 call 3).
  const uint64_t bd = blockDim.x;
  if (l1 - l0 <= bd) {
    const uint64_t i = l0 + threadIdx.x;
    if (i < l1) {
      const uint64_t v = first.have ? first.v : word(i);
      store_volatile_16(slot + 32 + 16 * i, uint32_t(v), f, uint32_t(v >> 32), f);
    }
    return;
  }
  for (uint64_t i = l0 + threadIdx.x; i < l1; i += 2 * bd) {
    const uint64_t j = i + bd;
    const uint64_t vi = first.have && i == l0 + threadIdx.x ? first.v : word(i);
    const uint64_t vj = j < l1 ? word(j) : 0;
    store_volatile_16(slot + 32 + 16 * i, uint32_t(vi), f, uint32_t(vi >> 32), f);
    if (j < l1) store_volatile_16(slot + 32 + 16 * j, uint32_t(vj), f, uint32_t(vj >> 32), f);
  }
}

// Published form, receiver (thread 0 of each of its blocks, after block 0 posted recv k): waits for
// whichever way the sender's message k comes: pub_ready >= k (direct or copy-engine copy, ReadyDesc
// tells how it went) or the LL header in ring slot k % kLLSlots (the sender chooses by its length,
// so a length mismatch across the ll_max boundary is still seen as a mismatch, never a hang). slot
// nullptr: LL is off. Returns 1 direct, 2 LL, 0 failed. (Also the NCCL form's wait for chunk g:
// ready = raw_slot_ready[slot], k = g + 1.)
// The flag and both header lines are loaded together, then tested: one memory latency per round
// (tested one after the other they were three, and the message landing mid-round waited for them).
__device__ int wait_ready_or_ll(const Ctx& x, const uint64_t* ready, uint64_t k, const char* slot, uint32_t* hdr) {
  const uint32_t f = ll_flag(k);
  uint64_t t0 = 0;
  for (uint32_t n = 0;; ++n) {
    const uint64_t r = load_volatile(ready);
    uint32_t a = 0, fa = 0, b = 0, fb = 0, c2 = 0, fc = 0, d = 0, fd = 0;
    if (slot) {
      load_volatile_16(slot, a, fa, b, fb);
      load_volatile_16(slot + 16, c2, fc, d, fd);
    }
    if (r >= k) return 1;
    if (slot && fa == f && fb == f && fc == f && fd == f) {  // published: {buf_id, len, offset low, offset high}
      hdr[0] = a;
      hdr[1] = b;
      hdr[2] = c2;
      hdr[3] = d;
      return 2;
    }
    if (n == 0) t0 = now_ns();
    if ((n & 127) == 127) {
      if (load_volatile(x.abort)) {
        record_error(x, kErrAborted);
        return 0;
      }
      if (now_ns() - t0 > x.L->timeout_ns) {
        record_error(x, kErrTimeout);
        abort_pair(x);
        return 0;
      }
    }
  }
}

// One thread: waits until the LL line at `line`, already loaded once as {lo, flo, hi, fhi}, carries
// flag f. False on timeout (recorded; the pair aborts), abort, or another thread's failure (*fail).
__device__ bool ll_wait_line(const Ctx& x, const char* line, uint32_t f, uint32_t& lo, uint32_t& hi, uint32_t flo,
                             uint32_t fhi, volatile int* fail) {
  if (flo == f && fhi == f) return true;
  const uint64_t t0 = now_ns();
  for (uint32_t n = 1;; ++n) {
    load_volatile_16(line, lo, flo, hi, fhi);
    if (flo == f && fhi == f) return true;
    if ((n & 1023) == 0) {
      if (load_volatile(x.abort) || *fail) {
        *fail = 1;
        return false;
      }
      if (now_ns() - t0 > x.L->timeout_ns) {
        record_error(x, kErrTimeout);
        abort_pair(x);
        *fail = 1;
        return false;
      }
    }
  }
}

// All threads: waits for data lines [l0, l1) of an LL message of `len` bytes, copies their bytes to
// dst (nullptr: a mismatch, nothing written) and zeroes them; with `zero_header` thread 0 zeroes the
// two header lines too. False when a wait ran out (recorded; the pair aborts). Ends with a
// __syncthreads: every line read and zeroed before thread 0 gives the credit back.
__device__ bool ll_read(const Ctx& x, uint64_t k, char* slot, uint64_t len, char* dst, uint64_t l0, uint64_t l1,
                        bool zero_header) {
  __shared__ int s_fail;
  if (threadIdx.x == 0) s_fail = 0;
  __syncthreads();
  volatile int* fail = &s_fail;
  const uint32_t f = ll_flag(k);
  const bool aligned = (reinterpret_cast<uintptr_t>(dst) & 7) == 0;
  auto emit = [&](uint64_t i, uint32_t lo, uint32_t hi) {
    const uint64_t v = (uint64_t(hi) << 32) | lo;
    if (!dst) return;
    if (aligned && 8 * i + 8 <= len) {
      *reinterpret_cast<uint64_t*>(dst + 8 * i) = v;
    } else {
      for (uint64_t b = 8 * i; b < len && b < 8 * i + 8; ++b) dst[b] = char(uint8_t(v >> (8 * (b - 8 * i))));
    }
  };
  // Two lines per pass, both loaded before either is waited for (as ll_write stores them): a thread
  // with two lines pays one memory latency when both have landed, not two.
  const uint64_t bd = blockDim.x;
  if (l1 - l0 <= bd) {  // at most one line per thread (as in ll_write)
    const uint64_t i = l0 + threadIdx.x;
    if (i < l1) {
      char* li = slot + 32 + 16 * i;
      uint32_t a0, fa0, a1, fa1;
      load_volatile_16(li, a0, fa0, a1, fa1);
      if (ll_wait_line(x, li, f, a0, a1, fa0, fa1, fail)) {
        emit(i, a0, a1);
        store_volatile_16(li, 0, 0, 0, 0);
      }
    }
  }
  for (uint64_t i = l0 + threadIdx.x; i < l1 && l1 - l0 > bd; i += 2 * bd) {
    const uint64_t j = i + bd;
    const bool two = j < l1;
    char* li = slot + 32 + 16 * i;
    char* lj = slot + 32 + 16 * j;
    uint32_t a0, fa0, a1, fa1, b0 = 0, fb0 = 0, b1 = 0, fb1 = 0;
    load_volatile_16(li, a0, fa0, a1, fa1);
    if (two) load_volatile_16(lj, b0, fb0, b1, fb1);
    if (!ll_wait_line(x, li, f, a0, a1, fa0, fa1, fail)) break;
    if (two && !ll_wait_line(x, lj, f, b0, b1, fb0, fb1, fail)) break;
    if (*fail) break;
    emit(i, a0, a1);
    store_volatile_16(li, 0, 0, 0, 0);
    if (two) {
      emit(j, b0, b1);
      store_volatile_16(lj, 0, 0, 0, 0);
    }
  }
  if (zero_header && threadIdx.x == 0) {
    store_volatile_16(slot, 0, 0, 0, 0);
    store_volatile_16(slot + 16, 0, 0, 0, 0);
  }
  __syncthreads();
  return s_fail == 0;
}

}  // namespace
}  // namespace peerlink::stream
