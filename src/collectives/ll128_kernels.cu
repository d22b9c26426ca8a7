// One-shot allreduce through LL128 lines (medium messages over NVLink; layout.h). Each rank pushes
// its whole input into every peer's LL128 area as 128-byte lines of 120 data bytes and an 8-byte
// flag (the call's sequence number), then reads every peer's lines from its own area and reduces
// them in rank order. Compared with the flag kernel (oneshot_kernels.cu) a line is usable the
// moment it lands: no fence waiting for the stores' acknowledgements and no flag round after the
// data, at 6.7 % more bytes on the link (LL lines carry 100 %).
// Line format and lane roles: ll128_device.h.
#include "collectives/device_launch.h"
#include "collectives/ll128_device.h"
#include "collectives/reduce_ops.h"
#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::coll {
namespace {

using namespace ll128;
constexpr int kOwnPasses = 4;  // passes whose own words stay in registers (loaded with the counter)

template <typename T, int Op>
__global__ void __launch_bounds__(1024) oneshot_ll128_kernel(LaunchArgs a) {
  const char* src = static_cast<const char*>(a.src);
  char* dst = static_cast<char*>(a.dst);
  const size_t bytes = a.split.count * sizeof(T);
  const size_t nlines = ll128_lines(bytes);
  const bool aligned = ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 7) == 0;
  // Groups of kLinesPerStore lines (one warp store) dealt round-robin to the grid's warps: pass k
  // of warp w moves group k * warps + w (the same split on every rank). Contiguous runs per warp
  // left most warps of a 1 MB call idle (8739 lines, 2112 warps: 8 lines each, 1093 warps busy).
  const size_t warps = warp_count(), warp = warp_index();
  const int passes = int((groups_of(nlines) + warps - 1) / warps);
  auto line_of = [&](int k) { return line_in(size_t(k) * warps + warp); };
  uint64_t own0[kOwnPasses], own1[kOwnPasses];
  uint64_t seq0;
  if (!kernel_begin(a, seq0, [&] {
#pragma unroll
        for (int k = 0; k < kOwnPasses; ++k) load_words(src, bytes, aligned, k < passes ? line_of(k) : nlines, own0[k], own1[k]);
      }))
    return;
  const uint64_t seq = seq0 + 1;
  const int slot = int(seq & 1);
  const int me = a.rank, n = a.world;
  const DataLayout& L = a.layout;

  // 1. Push our lines into every peer's area.
  auto push = [&](size_t l, uint64_t x0, uint64_t x1) {
    if (l >= nlines) return;
    for (int p = 0; p < n; ++p)
      if (p != me) put(a.data[p] + L.ll128(slot, me), l, x0, x1, seq);
  };
#pragma unroll
  for (int k = 0; k < kOwnPasses; ++k)
    if (k < passes) push(line_of(k), own0[k], own1[k]);
  for (int k = kOwnPasses; k < passes; ++k) {
    uint64_t x0, x1;
    load_words(src, bytes, aligned, line_of(k), x0, x1);
    push(line_of(k), x0, x1);
  }

  // 2. Per line, every rank's words in rank order (ours from registers or the input), then the
  // result. Every lane of the warp takes part in each wait, lines past the end included.
  bool ok = true;  // the same on every lane of a warp (take)
  auto reduce_line = [&](size_t l, uint64_t x0, uint64_t x1) {
    const bool active = l < nlines;
    using AccT = typename Acc<T>::type;
    AccT acc0[8 / sizeof(T)], acc1[8 / sizeof(T)];
    for (int r = 0; r < n && ok; ++r) {
      uint64_t v0 = x0, v1 = x1;
      if (r != me && !(ok = take(a, a.data[me] + L.ll128(slot, r), l, active, seq, r, v0, v1))) break;
      if (n == 1) break;  // nothing to combine: the bytes move unchanged (NaN payloads kept)
      fold<T, Op>(acc0, v0, r == 0);
      fold<T, Op>(acc1, v1, r == 0);
    }
    if (!ok || !active) return;
    store_words(dst, bytes, aligned, l, n == 1 ? x0 : unfold<T, Op>(acc0, n), n == 1 ? x1 : unfold<T, Op>(acc1, n));
  };
#pragma unroll
  for (int k = 0; k < kOwnPasses; ++k)
    if (k < passes && ok) reduce_line(line_of(k), own0[k], own1[k]);
  for (int k = kOwnPasses; k < passes && ok; ++k) {
    uint64_t x0, x1;
    load_words(src, bytes, aligned, line_of(k), x0, x1);
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
    case kOpAvg: launch_kernel(oneshot_ll128_kernel<T, kOpAvg>, a, st); break;
    default:
      throw InvalidArgument(common::format("allreduce: unknown reduce op code {}", a.op));
  }
}

}  // namespace

void launch_ll128(const LaunchArgs& a, DevStream st) {
  if (a.threads % kWarpSize != 0)
    throw InvalidArgument(
        common::format("allreduce LL128 launch: {} threads per block is not a multiple of {}", a.threads, kWarpSize));
  bool known = with_type(a.dtype, [&](auto t) { launch_op<decltype(t)>(a, st); });
  if (!known) throw InvalidArgument(common::format("allreduce: unknown dtype code {}", a.dtype));
}

}  // namespace peerlink::coll
