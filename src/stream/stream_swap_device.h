// Device side of the NCCL form's in-place zero-copy exchange (kOpGateZc; host side: stream_gate.cpp).
// Included only by stream_raw_device.h.
//
// Why: in place, a recv writes the bytes its own rank's send of the same launch reads. Staged
// (kOpGated: each staged chunk waits until the send read it) that cost the copy-out the zero-copy
// path avoids: nccl-tests sendrecv_perf -g 2 -G 100, 2x H200, in place 32 MB
// 119.08 us, 128 MB 400.72 against NCCL's 105.98 / 385.74, while out of place (zero-copy) took
// 105.78 / 381.45.
//
// Protocol. Rank A receives zero-copy message d from C into bytes X that A's send to B reads:
//   A's recv   block 0 records, in C's area, direct_gate[d % kDirectRing] = swap_tag(d) << 32 | base
//              (A's gates for the message are swap_gate[base, base + units) of A's section in C's
//              area), then posts X with kPostGated. C's send sees the gated post, reads the record
//              (the two stores are not ordered: it waits for the tag) and writes unit u of X only
//              once swap_gate[base + u] == swap_tag(d).
//   A's send   moves X in units of kSwapUnit bytes (block b takes u = b, b + nb, ...): loads the whole
//              unit into registers, then (thread 0, after a barrier that every loaded word feeds:
//              every load returned) opens the unit's gate in C's area, and only then waits, if B's
//              post was gated too, for B's gate of the unit in A's area before it stores the
//              registers into B's buffer (the next unit's loads are in flight meanwhile).
//              A staged send (B's post was 0) opens the units of each chunk once it read the chunk.
// Every block opens the gate of a unit before it waits for anything about that unit, so a ring of
// such exchanges (two ranks swapping, or A -> B -> C -> A) cannot deadlock: the smallest unit not
// yet written has both its gates open. Gates are relaxed, as a credit is (wait_credit): the hazard
// is the writer's stores against loads that already returned, and the writer stores only after its
// load saw the gate. Tags never repeat in place (they number the pair's zero-copy messages), so no
// gate is ever reset and a graph replays the exchange as it is.
#pragma once
#include "stream/stream_direct_device.h"
#include "stream/stream_ll_device.h"

namespace peerlink::stream {
namespace {  // one translation unit includes this

constexpr int kSwapVecs = 4;  // 16-byte registers per thread holding one unit (512 threads)
static_assert(uint64_t(kSwapVecs) * 16 * kThreads == kSwapUnit, "one register set of a block of kThreads holds one unit");

__device__ __forceinline__ uint32_t swap_tag(uint64_t d) { return ll_flag(d); }

// The gates a send opens or waits for (all null: a plain zero-copy copy).
struct SwapGates {
  volatile uint32_t* open;        // our gates in the writer's area (kOpGateZc), or null
  uint32_t open_tag;
  const volatile uint32_t* wait;  // the receiver's gates in our area (its post was gated), or null
  uint32_t wait_tag;
};

// Receiver, block 0's posting thread: zero-copy message d into op.dst, gated from op.buf_id on.
__device__ void post_gated(const Ctx& x, uint64_t d, const DevOp& op) {
  reinterpret_cast<volatile uint64_t*>(x.c->remote->direct_gate)[d % kDirectRing] =
      (uint64_t(swap_tag(d)) << 32) | op.buf_id;
  post_direct(x, d, reinterpret_cast<uint64_t>(op.dst) | kPostGated);
}

// Sender, thread 0, after a gated post of message d of len bytes: the receiver's gates in our area.
// Null (recorded) on timeout, abort or a base whose gates would not fit (the record is the peer's).
__device__ const volatile uint32_t* receiver_gates(const Ctx& x, uint64_t d, uint64_t len) {
  const volatile uint64_t* p = &x.c->mine->direct_gate[d % kDirectRing];
  const uint32_t want = swap_tag(d);
  uint64_t t0 = 0;
  for (uint32_t n = 0;; ++n) {
    const uint64_t v = *p;
    if (uint32_t(v >> 32) == want) {
      const uint64_t base = uint32_t(v);
      if (base <= kSwapGateCap && swap_units(len) <= kSwapGateCap - base) return &x.c->mine->swap_gate[base];
      record_error(x, kErrProtocol);
      abort_pair(x);
      return nullptr;
    }
    if (n == 0) t0 = now_ns();
    if ((n & 127) == 127 && wait_failed(x, t0)) return nullptr;
  }
}

// Thread 0 of a send block, at the start of op: our gates (kOpGateZc) and their tag, the paired
// recv's zero-copy message number. Its channel's counter is still the launch's start value whenever
// this block opens a unit with it: the recv cannot finish (and its channel write the counter) before
// every unit was opened. (A block without units of op reads it and never uses it.)
__device__ void our_gates(const Ctx& x, const DevOp& op, SwapGates* g) {
  if (!(op.flags & kOpGateZc)) {
    g->open = nullptr;
    return;
  }
  g->open = reinterpret_cast<volatile uint32_t*>(op.dst);
  g->open_tag = swap_tag(load_volatile(&x.chs[op.buf_id].mine->direct_recvd.v) + op.offset);
}

// Thread 0: waits until gate *f shows `want`. False on timeout or abort (recorded).
__device__ bool wait_gate(const Ctx& x, const volatile uint32_t* f, uint32_t want) {
  if (*f == want) return true;
  const uint64_t t0 = now_ns();
  for (uint32_t n = 1; *f != want; ++n)
    if ((n & 127) == 0 && wait_failed(x, t0)) return false;
  return true;
}

// A unit of n bytes at src (16-byte aligned, whole vectors) into registers: the loads are only
// issued here; fold() waits for them.
__device__ __forceinline__ void load_unit(const char* src, uint64_t n, uint4 (&v)[kSwapVecs]) {
  const uint4* s = reinterpret_cast<const uint4*>(src);
#pragma unroll
  for (int k = 0; k < kSwapVecs; ++k) {
    const uint64_t i = threadIdx.x + uint64_t(k) * blockDim.x;
    if (i < n / 16) v[k] = s[i];
  }
}

// Every word of a loaded unit, or-ed: fed to a barrier, it makes every thread's loads of the unit
// return before the barrier ends. A bar.sync alone does not wait for loads whose registers are not
// used yet, and such a load, still in flight when the gate opens, could return bytes the writer
// stored after seeing it (a version of the exchange that used the registers only after the gate
// returned the receiver's own bytes in some units).
__device__ __forceinline__ uint32_t fold(const uint4 (&v)[kSwapVecs], uint64_t n) {
  uint32_t seen = 0;
#pragma unroll
  for (int k = 0; k < kSwapVecs; ++k)
    if (threadIdx.x + uint64_t(k) * blockDim.x < n / 16) seen |= v[k].x | v[k].y | v[k].z | v[k].w;
  return seen;
}

__device__ __forceinline__ void store_unit(char* dst, uint64_t n, bool dst16, const uint4 (&v)[kSwapVecs]) {
#pragma unroll
  for (int k = 0; k < kSwapVecs; ++k) {
    const uint64_t i = threadIdx.x + uint64_t(k) * blockDim.x;
    if (i >= n / 16) continue;
    if (dst16) {
      reinterpret_cast<uint4*>(dst)[i] = v[k];
    } else {  // an out-of-place receiver's unaligned buffer: byte stores from the registers
      const char* b = reinterpret_cast<const char*>(&v[k]);
      for (int j = 0; j < 16; ++j) dst[i * 16 + uint64_t(j)] = b[j];
    }
  }
}

__device__ __forceinline__ uint64_t unit_bytes(uint64_t len, uint64_t u) {
  return len - u * kSwapUnit < kSwapUnit ? len - u * kSwapUnit : kSwapUnit;
}

// Every block of a send channel: message op into the receiver's buffer dst, unit by unit, as the
// gates say (the protocol above; src is 16-byte aligned with whole vectors whenever g.open). A
// block holding units loads its next unit before it waits for and stores the current one, so the
// loads' latency hides behind the stores (two units of registers). From kSwapEarlyMin bytes the
// next unit's loads also return, and its gate opens, before the current unit waits and is stored:
// loads and stores no longer overlap (measurements: stream_layout.h). Units still go in rising order
// per block and a gate opens earlier, never later, so the no-deadlock argument above holds. False
// on failure (recorded); the caller then stops.
__device__ bool swap_copy(const Ctx& x, const DevOp& op, char* dst, const SwapGates& g) {
  const uint64_t units = swap_units(op.len), nb = uint64_t(x.nb);
  auto gate_open = [&](uint64_t u) {  // all threads: the receiver read unit u (no gate: always)
    return !g.wait || __syncthreads_and(threadIdx.x != 0 || wait_gate(x, &g.wait[u], g.wait_tag));
  };
  if (!g.open) {  // nothing of ours is overwritten: copy each unit once the receiver read it
    for (uint64_t u = uint64_t(x.blk); u < units; u += nb) {
      if (!gate_open(u)) return false;
      part_copy(dst + u * kSwapUnit, op.src + u * kSwapUnit, unit_bytes(op.len, u), false, 0, 1);
    }
    return true;
  }
  if (blockDim.x * kSwapVecs * 16 < kSwapUnit) {  // the host launches kThreads (stream_gpu_launch.cpp)
    if (threadIdx.x == 0) {
      record_error(x, kErrProtocol);
      abort_pair(x);
    }
    return false;
  }
  const bool dst16 = (reinterpret_cast<uintptr_t>(dst) & 15) == 0;
  uint64_t u = uint64_t(x.blk);
  if (u >= units) return true;
  uint4 cur[kSwapVecs], next[kSwapVecs];
  const bool early = op.len >= kSwapEarlyMin;
  load_unit(op.src + u * kSwapUnit, unit_bytes(op.len, u), cur);
  __syncthreads_or(fold(cur, unit_bytes(op.len, u)));
  if (threadIdx.x == 0) g.open[u] = g.open_tag;
  for (;;) {
    const uint64_t nu = u + nb;
    if (nu < units) load_unit(op.src + nu * kSwapUnit, unit_bytes(op.len, nu), next);  // its gate is still closed
    if (early && nu < units) {
      __syncthreads_or(fold(next, unit_bytes(op.len, nu)));
      if (threadIdx.x == 0) g.open[nu] = g.open_tag;
    }
    if (!gate_open(u)) return false;
    store_unit(dst + u * kSwapUnit, unit_bytes(op.len, u), dst16, cur);
    if (nu >= units) return true;
    if (!early) {
      __syncthreads_or(fold(next, unit_bytes(op.len, nu)));
      if (threadIdx.x == 0) g.open[nu] = g.open_tag;
    }
#pragma unroll
    for (int k = 0; k < kSwapVecs; ++k) cur[k] = next[k];
    u = nu;
  }
}

// Thread 0 of a staged send block, after the block read [off, off + len) of op (len > 0): opens the
// units it covers (the host paired only chunks of whole units: stream_gate.cpp).
__device__ void open_units(const SwapGates& g, uint64_t off, uint64_t len) {
  for (uint64_t u = off / kSwapUnit; u <= (off + len - 1) / kSwapUnit; ++u) g.open[u] = g.open_tag;
}

}  // namespace
}  // namespace peerlink::stream
