// One-shot allreduce with flags for medium messages (one step, 16-byte aligned buffers): the
// latency-bound middle between the LL kernel (small) and the bandwidth kernel (large).
//
// Per block: load our slice of the input (issued together with the counter read), push it into
// every peer's input region, publish the block's flag (release), wait for every peer's flag
// (acquire), then reduce in rank order with our own values still in registers. Compared with the
// generic loop in allreduce_kernels.cu this saves the serial memory latencies of re-reading our
// input and of reading the counter before the input.
#include "collectives/device_compat.h"
#include "collectives/device_launch.h"
#include "collectives/device_sync.h"
#include "collectives/reduce_ops.h"
#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::coll {
namespace {

constexpr int kRegUnits = 4;  // 16-byte units per thread held in registers (512 threads: 32 KB/block)

// Reduces v[0..n-1] (rank order) element-wise; f16/bf16 accumulate in f32 as everywhere else.
template <typename T, int Op, int NMax>
__device__ __forceinline__ Pack16 reduce16(const Pack16 (&v)[NMax], int n) {
  using A = Acc<T>;
  constexpr int V = 16 / sizeof(T);
  T x[V];
  typename A::type acc[V];
  memcpy(x, &v[0], 16);
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = A::in(x[j]);
#pragma unroll
  for (int r = 1; r < NMax; ++r) {
    if (r < n) {
      memcpy(x, &v[r], 16);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] = Apply<Op>::run(acc[j], A::in(x[j]));
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) x[j] = A::out(finish<Op>(acc[j], n));
  Pack16 out;
  memcpy(&out, x, 16);
  return out;
}

// NMax: the largest world size the instantiation serves (2, or kMaxRanks), so that the registers
// for the peers' values are sized for the common two-rank case.
template <typename T, int Op, int NMax>
__global__ void __launch_bounds__(1024) oneshot_kernel(LaunchArgs a) {
  constexpr int V = 16 / sizeof(T);
  const Split& s = a.split;
  const int me = a.rank, n = a.world;
  const size_t lo = size_t(blockIdx.x) * s.per_block;  // a multiple of V (layout.h)
  const size_t hi = lo + s.per_block < s.count ? lo + s.per_block : s.count;
  const size_t m = lo < hi ? hi - lo : 0;
  const size_t nvec = m / V;
  const T* src = static_cast<const T*>(a.src) + lo;
  T* __restrict__ dst = static_cast<T*>(a.dst) + lo;
  const Pack16* src16 = reinterpret_cast<const Pack16*>(src);
  Pack16 own[kRegUnits];
  uint64_t seq0;
  if (!kernel_begin(a, seq0, [&] {
#pragma unroll
        for (int k = 0; k < kRegUnits; ++k) {
          size_t u = threadIdx.x + size_t(k) * blockDim.x;
          if (u < nvec) own[k] = src16[u];
        }
      }))
    return;
  const uint64_t seq = seq0 + 1;
  const int slot = int(seq & 1);
  const DataLayout& L = a.layout;
  // Where rank r's slice of this block lives in rank q's input region.
  auto region = [&](int q, int r) { return reinterpret_cast<T*>(a.data[q] + L.input(slot, r)) + lo; };

  // 1. Push our slice to every peer.
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    Pack16* out = reinterpret_cast<Pack16*>(region(p, me));
#pragma unroll
    for (int k = 0; k < kRegUnits; ++k) {
      size_t u = threadIdx.x + size_t(k) * blockDim.x;
      if (u < nvec) out[u] = own[k];
    }
    for (size_t u = threadIdx.x + size_t(kRegUnits) * blockDim.x; u < nvec; u += blockDim.x) out[u] = src16[u];
    T* outs = region(p, me);
    for (size_t e = nvec * V + threadIdx.x; e < m; e += blockDim.x) outs[e] = src[e];
  }
  if (n > 1) {
    signal_peers(a, 0, seq);
    if (!wait_peers(a, 0, seq)) return;
  }

  // 2. Reduce in rank order: our values from registers, the peers' from our input region.
  Pack16* dst16 = reinterpret_cast<Pack16*>(dst);
  auto reduce_unit = [&](size_t u, const Pack16& mine) {
    if (n == 1) {  // nothing to combine: move the bytes unchanged (NaN payloads kept)
      dst16[u] = mine;
      return;
    }
    Pack16 v[NMax];
#pragma unroll
    for (int r = 0; r < NMax; ++r)
      if (r < n) v[r] = r == me ? mine : load_fresh(reinterpret_cast<const Pack16*>(region(me, r)) + u);
    dst16[u] = reduce16<T, Op, NMax>(v, n);
  };
#pragma unroll
  for (int k = 0; k < kRegUnits; ++k) {
    size_t u = threadIdx.x + size_t(k) * blockDim.x;
    if (u < nvec) reduce_unit(u, own[k]);
  }
  for (size_t u = threadIdx.x + size_t(kRegUnits) * blockDim.x; u < nvec; u += blockDim.x) reduce_unit(u, src16[u]);
  for (size_t e = nvec * V + threadIdx.x; e < m; e += blockDim.x) {  // tail of the last block
    using A = Acc<T>;
    if (n == 1) {
      dst[e] = src[e];
      continue;
    }
    typename A::type acc{};
    for (int r = 0; r < n; ++r) {
      typename A::type x = A::in(r == me ? src[e] : load_fresh_scalar(region(me, r) + e));
      acc = r == 0 ? x : Apply<Op>::run(acc, x);
    }
    dst[e] = A::out(finish<Op>(acc, n));
  }
  kernel_end(a, seq);
}

template <typename T, int NMax>
void launch_op(const LaunchArgs& a, DevStream st) {
  switch (a.op) {
    case kOpSum: launch_kernel(oneshot_kernel<T, kOpSum, NMax>, a, st); break;
    case kOpMax: launch_kernel(oneshot_kernel<T, kOpMax, NMax>, a, st); break;
    case kOpMin: launch_kernel(oneshot_kernel<T, kOpMin, NMax>, a, st); break;
    case kOpProd: launch_kernel(oneshot_kernel<T, kOpProd, NMax>, a, st); break;
    case kOpAvg: launch_kernel(oneshot_kernel<T, kOpAvg, NMax>, a, st); break;
    default:
      throw InvalidArgument(common::format("allreduce: unknown reduce op code {}", a.op));
  }
}

}  // namespace

bool oneshot_fits(const LaunchArgs& a) {
  const uintptr_t align = reinterpret_cast<uintptr_t>(a.src) | reinterpret_cast<uintptr_t>(a.dst);
  return a.one_shot && !a.ll && !a.ll128 && !a.generic_oneshot && a.split.steps == 1 && (align & 15) == 0;
}

void launch_oneshot(const LaunchArgs& a, DevStream st) {
  bool known = with_type(a.dtype, [&](auto t) {
    if (a.world <= 2) launch_op<decltype(t), 2>(a, st);
    else launch_op<decltype(t), kMaxRanks>(a, st);
  });
  if (!known) throw InvalidArgument(common::format("allreduce: unknown dtype code {}", a.dtype));
}

}  // namespace peerlink::coll
