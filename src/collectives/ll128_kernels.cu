// One-shot allreduce through LL128 lines (medium messages over NVLink; layout.h). Each rank pushes
// its whole input into every peer's LL128 area as 128-byte lines of 120 data bytes and an 8-byte
// flag (the call's sequence number), then reads every peer's lines from its own area and reduces
// them in rank order. Compared with the flag kernel (oneshot_kernels.cu) a line is usable the
// moment it lands: no fence waiting for the stores' acknowledgements and no flag round after the
// data, at 6.7 % more bytes on the link (LL lines carry 100 %).
//
// Lanes: 8 per line, 16 bytes each; lanes 0-6 carry words 2j and 2j+1 of the line's 15 data words,
// lane 7 carries word 14 and the flag. One warp store writes kWarpSize / 8 whole lines, and a warp
// load reads them; a lane group whose flag is not there yet makes the whole warp load again.
#include "collectives/device_compat.h"
#include "collectives/device_launch.h"
#include "collectives/device_reduce.h"
#include "collectives/device_sync.h"
#include "collectives/reduce_ops.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::coll {
namespace {

constexpr int kLineLanes = 8;
constexpr int kLinesPerStore = kWarpSize / kLineLanes;
constexpr size_t kLineWords = kLl128Data / 8;  // 15
using gpu::dev::warp_any;
constexpr int kOwnPasses = 4;  // passes whose own words stay in registers (loaded with the counter)

__device__ __forceinline__ void store_line16(char* p, uint64_t x0, uint64_t x1) {
  gpu::dev::store_volatile_16(p, uint32_t(x0), uint32_t(x0 >> 32), uint32_t(x1), uint32_t(x1 >> 32));
}
__device__ __forceinline__ void load_line16(const char* p, uint64_t& x0, uint64_t& x1) {
  uint32_t a, b, c, d;
  gpu::dev::load_volatile_16(p, a, b, c, d);
  x0 = (uint64_t(b) << 32) | a;
  x1 = (uint64_t(d) << 32) | c;
}

// acc (op) the E elements of word v; first: acc = v.
template <typename T, int Op>
__device__ __forceinline__ void fold(typename Acc<T>::type (&acc)[8 / sizeof(T)], uint64_t v, bool first) {
  constexpr int E = 8 / sizeof(T);
  T x[E];
  memcpy(x, &v, 8);
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = first ? Acc<T>::in(x[e]) : Apply<Op>::run(acc[e], Acc<T>::in(x[e]));
}
template <typename T>
__device__ __forceinline__ uint64_t unfold(const typename Acc<T>::type (&acc)[8 / sizeof(T)]) {
  constexpr int E = 8 / sizeof(T);
  T x[E];
#pragma unroll
  for (int e = 0; e < E; ++e) x[e] = Acc<T>::out(acc[e]);
  uint64_t v;
  memcpy(&v, x, 8);
  return v;
}

template <typename T, int Op>
__global__ void __launch_bounds__(1024) oneshot_ll128_kernel(LaunchArgs a) {
  const char* src = static_cast<const char*>(a.src);
  char* dst = static_cast<char*>(a.dst);
  const size_t bytes = a.split.count * sizeof(T);
  const size_t nwords = (bytes + 7) / 8;
  const size_t nlines = ll128_lines(bytes);
  const bool aligned = ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 7) == 0;
  const int lane = threadIdx.x % kWarpSize, j = lane % kLineLanes;
  // Groups of kLinesPerStore lines (one warp store) dealt round-robin to the grid's warps: pass k
  // of warp w moves group k * warps + w (the same split on every rank). Contiguous runs per warp
  // left most warps of a 1 MB call idle (8739 lines, 2112 warps: 8 lines each, 1093 warps busy).
  const size_t warps = size_t(gridDim.x) * (blockDim.x / kWarpSize);
  const size_t warp = size_t(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  const size_t groups = (nlines + kLinesPerStore - 1) / kLinesPerStore;
  const int passes = int((groups + warps - 1) / warps);
  auto line_of = [&](int k) { return (size_t(k) * warps + warp) * kLinesPerStore + lane / kLineLanes; };
  // The lane's own data words of line `l` (lane 7 has one: x1 is unused there).
  auto load_own = [&](size_t l, uint64_t& x0, uint64_t& x1) {
    size_t w = l * kLineWords + 2 * j;
    x0 = l < nlines && w < nwords ? load_word(src, w, bytes, aligned) : 0;
    x1 = l < nlines && j < kLineLanes - 1 && w + 1 < nwords ? load_word(src, w + 1, bytes, aligned) : 0;
  };
  uint64_t own0[kOwnPasses], own1[kOwnPasses];
  uint64_t seq0;
  if (!kernel_begin(a, seq0, [&] {
#pragma unroll
        for (int k = 0; k < kOwnPasses; ++k) load_own(k < passes ? line_of(k) : nlines, own0[k], own1[k]);
      }))
    return;
  const uint64_t seq = seq0 + 1;
  const int slot = int(seq & 1);
  const int me = a.rank, n = a.world;
  const DataLayout& L = a.layout;
  FlagArea* mine = a.flags[me];

  // 1. Push our lines into every peer's area (lane 7's second word is the flag).
  auto push = [&](size_t l, uint64_t x0, uint64_t x1) {
    if (l >= nlines) return;
    uint64_t hi = j == kLineLanes - 1 ? seq : x1;
    for (int p = 0; p < n; ++p)
      if (p != me) store_line16(a.data[p] + L.ll128(slot, me) + l * kLl128Line + j * 16, x0, hi);
  };
#pragma unroll
  for (int k = 0; k < kOwnPasses; ++k)
    if (k < passes) push(line_of(k), own0[k], own1[k]);
  for (int k = kOwnPasses; k < passes; ++k) {
    uint64_t x0, x1;
    load_own(line_of(k), x0, x1);
    push(line_of(k), x0, x1);
  }

  // 2. Per line, every rank's words in rank order (ours from registers or the input), then the
  // result. Every lane of the warp takes part in each poll (warp_any), lines past the end included.
  bool ok = true;
  auto reduce_line = [&](size_t l, uint64_t x0, uint64_t x1) {
    const bool active = l < nlines;
    using AccT = typename Acc<T>::type;
    AccT acc0[8 / sizeof(T)], acc1[8 / sizeof(T)];
    for (int r = 0; r < n && ok; ++r) {
      uint64_t v0 = x0, v1 = x1;
      if (r != me) {
        const char* line = a.data[me] + L.ll128(slot, r) + l * kLl128Line + j * 16;
        uint64_t t0 = 0;
        for (uint32_t spins = 0;; ++spins) {
          if (active) load_line16(line, v0, v1);
          if (!warp_any(active && j == kLineLanes - 1 && v1 != seq)) break;
          if ((spins & 1023) == 1023) {
            bool stop = false;
            if (lane == 0) {
              uint64_t t = now_ns();
              if (t0 == 0) t0 = t;
              if (*reinterpret_cast<volatile uint32_t*>(&mine->abort)) {
                stop = true;
              } else if (t - t0 > a.timeout_ns) {
                report_timeout(a, r);
                stop = true;
              }
            }
            if (warp_any(stop)) {
              ok = false;
              break;
            }
          }
        }
        if (!ok) break;
      }
      if (n == 1) break;  // nothing to combine: the bytes move unchanged (NaN payloads kept)
      fold<T, Op>(acc0, v0, r == 0);
      fold<T, Op>(acc1, v1, r == 0);
    }
    if (!ok || !active) return;  // ok is warp-uniform (warp_any)
    uint64_t out0 = n == 1 ? x0 : unfold<T>(acc0), out1 = n == 1 ? x1 : unfold<T>(acc1);
    size_t w = l * kLineWords + 2 * j;
    if (w < nwords) store_word(dst, w, bytes, aligned, out0);
    if (j < kLineLanes - 1 && w + 1 < nwords) store_word(dst, w + 1, bytes, aligned, out1);
  };
#pragma unroll
  for (int k = 0; k < kOwnPasses; ++k)
    if (k < passes && ok) reduce_line(line_of(k), own0[k], own1[k]);
  for (int k = kOwnPasses; k < passes && ok; ++k) {
    uint64_t x0, x1;
    load_own(line_of(k), x0, x1);
    reduce_line(line_of(k), x0, x1);
  }
  // Every block reaches the barrier in kernel_end (ok is per warp here); after a timeout the
  // communicator's collectives are unusable anyway (the host reports it).
  kernel_end(a, seq);
}

template <typename T>
void launch_op(const LaunchArgs& a, DevStream st) {
  switch (a.op) {
    case kOpSum: launch_kernel(oneshot_ll128_kernel<T, kOpSum>, a, st); break;
    case kOpMax: launch_kernel(oneshot_ll128_kernel<T, kOpMax>, a, st); break;
    case kOpMin: launch_kernel(oneshot_ll128_kernel<T, kOpMin>, a, st); break;
    case kOpProd: launch_kernel(oneshot_ll128_kernel<T, kOpProd>, a, st); break;
    default: throw InvalidArgument(common::cat("allreduce: unknown reduce op code ", a.op));
  }
}

}  // namespace

void launch_ll128(const LaunchArgs& a, DevStream st) {
  if (a.threads % kWarpSize != 0)
    throw InvalidArgument(common::cat("allreduce LL128 launch: ", a.threads, " threads per block is not a multiple of ",
                                      kWarpSize));
  bool known = with_type(a.dtype, [&](auto t) { launch_op<decltype(t)>(a, st); });
  if (!known) throw InvalidArgument(common::cat("allreduce: unknown dtype code ", a.dtype));
}

}  // namespace peerlink::coll
