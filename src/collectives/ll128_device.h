// Device side of LL128 lines (layout.h), shared by allreduce's LL128 kernel (ll128_kernels.cu) and
// the other collectives' (coll_ll128_kernels.cu). Included by .cu files only.
//
// Lanes: 8 per line, 16 bytes each; lanes 0-6 carry words 2j and 2j+1 of the line's 15 data words,
// lane 7 carries word 14 and the flag (the call's sequence number). One warp store writes
// kWarpSize / 8 whole lines, one warp load reads them; a lane group whose flag is not there yet
// makes the whole warp load again. Every helper that polls must be called by every lane of the
// warp (warp_any), lanes without a line (past the end) included with active = false.
#pragma once
#include "collectives/device_compat.h"
#include "collectives/device_reduce.h"
#include "collectives/device_sync.h"
#include "collectives/layout.h"

namespace peerlink::coll::ll128 {

using gpu::dev::warp_any;
constexpr int kLineLanes = 8;
constexpr int kLinesPerStore = kWarpSize / kLineLanes;
constexpr size_t kLineWords = kLl128Data / 8;  // 15

__device__ __forceinline__ int lane() { return threadIdx.x % kWarpSize; }
__device__ __forceinline__ int pos() { return threadIdx.x % kLineLanes; }  // 16-byte position j in the line
__device__ __forceinline__ bool flag_lane() { return pos() == kLineLanes - 1; }
// This warp and the grid's warp count; group g (kLinesPerStore lines) of a piece goes to warp g % warps.
__device__ __forceinline__ size_t warp_index() { return size_t(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize; }
__device__ __forceinline__ size_t warp_count() { return size_t(gridDim.x) * (blockDim.x / kWarpSize); }
__device__ __forceinline__ size_t groups_of(size_t lines) { return (lines + kLinesPerStore - 1) / kLinesPerStore; }
// The lane's line in group g.
__device__ __forceinline__ size_t line_in(size_t g) { return g * kLinesPerStore + lane() / kLineLanes; }

// The lane's data words of line l of a piece of `bytes` at p (x1 unused on the flag lane).
__device__ __forceinline__ void load_words(const char* p, size_t bytes, bool aligned, size_t l, uint64_t& x0,
                                           uint64_t& x1) {
  const size_t nwords = (bytes + 7) / 8, w = l * kLineWords + 2 * pos();
  const bool in = l < ll128_lines(bytes);
  x0 = in && w < nwords ? load_word(p, w, bytes, aligned) : 0;
  x1 = in && !flag_lane() && w + 1 < nwords ? load_word(p, w + 1, bytes, aligned) : 0;
}
__device__ __forceinline__ void store_words(char* p, size_t bytes, bool aligned, size_t l, uint64_t x0, uint64_t x1) {
  const size_t nwords = (bytes + 7) / 8, w = l * kLineWords + 2 * pos();
  if (w < nwords) store_word(p, w, bytes, aligned, x0);
  if (!flag_lane() && w + 1 < nwords) store_word(p, w + 1, bytes, aligned, x1);
}

// Stores the lane's 16 bytes of line l into `area` (a peer's LL128 area position); the flag lane's
// second word is the flag.
__device__ __forceinline__ void put(char* area, size_t l, uint64_t x0, uint64_t x1, uint64_t flag) {
  const uint64_t hi = flag_lane() ? flag : x1;
  gpu::dev::store_volatile_16(area + l * kLl128Line + pos() * 16, uint32_t(x0), uint32_t(x0 >> 32), uint32_t(hi),
                              uint32_t(hi >> 32));
}

// Waits until line l of `area` (our own area position of rank `from`) carries `flag` on every
// active lane group of the warp, and returns the lane's 16 bytes. False (the same on every lane)
// when the wait ran out (recorded in the error word) or another block gave up.
__device__ __forceinline__ bool take(const LaunchArgs& a, const char* area, size_t l, bool active, uint64_t flag,
                                     int from, uint64_t& x0, uint64_t& x1) {
  const char* p = area + l * kLl128Line + pos() * 16;
  uint64_t t0 = 0;
  for (uint32_t spins = 0;; ++spins) {
    if (active) {
      uint32_t q0, q1, q2, q3;
      gpu::dev::load_volatile_16(p, q0, q1, q2, q3);
      x0 = (uint64_t(q1) << 32) | q0;
      x1 = (uint64_t(q3) << 32) | q2;
    }
    if (!warp_any(active && flag_lane() && x1 != flag)) return true;
    if ((spins & 1023) == 1023) {
      bool stop = false;
      if (lane() == 0) {
        const uint64_t t = now_ns();
        if (t0 == 0) t0 = t;
        if (*reinterpret_cast<volatile uint32_t*>(&a.flags[a.rank]->abort)) {
          stop = true;
        } else if (t - t0 > a.timeout_ns) {
          report_timeout(a, from);
          stop = true;
        }
      }
      if (warp_any(stop)) return false;
    }
  }
}

// acc (op) the elements of word v; first: acc = v.
template <typename T, int Op>
__device__ __forceinline__ void fold(typename Acc<T>::type (&acc)[8 / sizeof(T)], uint64_t v, bool first) {
  constexpr int E = 8 / sizeof(T);
  T x[E];
  memcpy(x, &v, 8);
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = first ? Acc<T>::in(x[e]) : Apply<Op>::run(acc[e], Acc<T>::in(x[e]));
}
// The words of a reduction over all n ranks (finish: reduce_ops.h).
template <typename T, int Op>
__device__ __forceinline__ uint64_t unfold(const typename Acc<T>::type (&acc)[8 / sizeof(T)], int n) {
  constexpr int E = 8 / sizeof(T);
  T x[E];
#pragma unroll
  for (int e = 0; e < E; ++e) x[e] = Acc<T>::out(finish<Op>(acc[e], n));
  uint64_t v;
  memcpy(&v, x, 8);
  return v;
}

}  // namespace peerlink::coll::ll128
