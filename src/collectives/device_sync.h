// Device-side synchronization shared by the allreduce kernels (included by .cu files only):
// programmatic dependent launch, the per-block flag protocol between ranks, and the kernel
// prologue/epilogue that keep the per-block sequence counters (layout.h).
#pragma once
#include "collectives/device_compat.h"
#include "collectives/device_launch.h"
#include "gpu/device.h"

namespace peerlink::coll {

// Programmatic dependent launch, release stores and fences: the shim's device header
// (gpu/device.h) spells them for CUDA and HIP. A kernel launched with the PDL attribute may be
// scheduled while the previous kernel on its stream still runs, so nothing before pdl_wait() may
// read the caller's input or our counters.
using gpu::dev::pdl_launch_dependents;
using gpu::dev::pdl_wait;

// Publishes `v` at f (a peer's inbox) after every store this block made before the preceding
// __syncthreads: a system-scope release store, cumulative through the barrier. (On 2x H200 this
// measured the same as the full fence.sc.sys + volatile store it replaced.)
__device__ __forceinline__ void flag_store_release(uint64_t* f, uint64_t v) { gpu::dev::store_release_system(f, v); }

// After a relaxed spin saw the flag: orders the reads of the peer's data after it (acquire).
__device__ __forceinline__ void fence_acquire() { gpu::dev::fence_acq_rel_system(); }

// After the block's stores: announce `seq` for (phase, block) to every peer.
__device__ __forceinline__ void signal_peers(const LaunchArgs& a, int phase, uint64_t seq) {
  __syncthreads();
  int p = threadIdx.x;
  if (p < a.world && p != a.rank) flag_store_release(&a.flags[p]->inbox[phase][blockIdx.x][a.rank], seq);
}

// Records a timed-out wait for `peer` (first reporter wins the error word) and stops the other blocks.
__device__ __forceinline__ void report_timeout(const LaunchArgs& a, int peer) {
  volatile uint32_t* err = a.error;
  if (*err == 0) *err = kErrTimeout | (uint32_t(peer) << 8) | (uint32_t(a.rank) << 16);
  *reinterpret_cast<volatile uint32_t*>(&a.flags[a.rank]->abort) = 1;
}

// One thread's bounded wait for *f >= seq, a flag `peer` publishes: false when this rank's abort
// word is set (another block gave up) or the wait ran out (recorded for `peer`). The abort word and
// the clock are read once every 256 spins.
__device__ __forceinline__ bool wait_flag_ge(const LaunchArgs& a, const volatile uint64_t* f, uint64_t seq, int peer) {
  if (*f >= seq) return true;
  const volatile uint32_t* abort = &a.flags[a.rank]->abort;
  const uint64_t t0 = now_ns();
  uint32_t spins = 0;
  while (*f < seq) {
    if ((++spins & 255) == 0) {
      if (*abort) return false;
      if (now_ns() - t0 > a.timeout_ns) {
        report_timeout(a, peer);
        return false;
      }
    }
  }
  return true;
}

// Waits until every peer announced >= seq for (phase, block). False when a wait ran out (recorded in
// the error word and the local abort word) or another block already gave up. (Its loop is
// wait_flag_ge's, kept inline: the allreduce timings in benchmarks/results were measured with this
// code, and folding it in changes the one-shot kernel's registers (58 -> 56); fold it when they
// are measured again.)
__device__ __forceinline__ bool wait_peers(const LaunchArgs& a, int phase, uint64_t seq) {
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
            report_timeout(a, p);
            s_failed = 1;
            break;
          }
        }
      }
    }
    fence_acquire();  // the peer's data is read after its flag
  }
  __syncthreads();
  return s_failed == 0;
}

// Kernel prologue: waits for the previous kernel (PDL), lets the next one be scheduled, and reads
// this block's step counter and the abort word. `prefetch` runs between issuing those reads and
// using them, so a kernel's first loads of its input travel together with the counter read instead
// of after it (one memory latency less per call). False when an earlier call timed out (the host
// reports it; do not wait again).
template <typename Prefetch>
__device__ __forceinline__ bool kernel_begin(const LaunchArgs& a, uint64_t& seq0, Prefetch&& prefetch) {
  __shared__ uint64_t s_seq;
  __shared__ uint32_t s_abort;
  pdl_wait();
  pdl_launch_dependents();
  FlagArea* mine = a.flags[a.rank];
  uint64_t c = 0;
  uint32_t ab = 0;
  if (threadIdx.x == 0) {
    ab = *reinterpret_cast<volatile uint32_t*>(&mine->abort);
    c = *reinterpret_cast<volatile uint64_t*>(&mine->counter[blockIdx.x]);
  }
  prefetch();
  if (threadIdx.x == 0) {
    s_abort = ab;
    s_seq = c;
  }
  __syncthreads();
  seq0 = s_seq;
  return s_abort == 0;
}
__device__ __forceinline__ bool kernel_begin(const LaunchArgs& a, uint64_t& seq0) {
  return kernel_begin(a, seq0, [] {});
}

// Kernel epilogue: every block's counter advances to `last`, including blocks this grid did not
// launch, so the next call (any grid size) starts from one sequence number on every block.
__device__ __forceinline__ void kernel_end(const LaunchArgs& a, uint64_t last) {
  __syncthreads();
  FlagArea* mine = a.flags[a.rank];
  if (threadIdx.x == 0) mine->counter[blockIdx.x] = last;
  if (blockIdx.x == 0)
    for (int j = gridDim.x + threadIdx.x; j < kMaxBlocks; j += blockDim.x) mine->counter[j] = last;
}

// The one-shot kernel of oneshot_kernels.cu serves a call when it fits: a one-shot (not LL) call of
// one step with 16-byte aligned buffers. Everything else runs the generic kernels.
bool oneshot_fits(const LaunchArgs& a);
void launch_oneshot(const LaunchArgs& a, DevStream st);
// LL128 lines (ll128_kernels.cu), for a call with LaunchArgs::ll128; threads a multiple of the warp.
void launch_ll128(const LaunchArgs& a, DevStream st);

// With a.pdl the launch carries the programmatic-stream-serialization attribute; the kernels wait
// for their predecessor (pdl_wait) before touching anything it may write. A plain launch's error
// is read once per call by launch_allreduce (gpu::dev::check_launch).
template <typename Kernel>
void launch_kernel(Kernel kernel, const LaunchArgs& a, DevStream st) {
  gpu::dev::launch(kernel, static_cast<unsigned>(a.blocks), static_cast<unsigned>(a.threads), st, a.pdl, a);
}

}  // namespace peerlink::coll
