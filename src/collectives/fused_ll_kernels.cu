// One-shot fused allreduce + residual add + RMSNorm through LL and LL128 lines (fused_plan.h): the
// small and medium token counts. Same protocol as the allreduce's one-shot LL / LL128 kernels
// (allreduce_kernels.cu, ll128_kernels.cu): one sequence number per call from the block's counter
// (kernel_begin / kernel_end), the lines of slot seq & 1 of every peer's area at this rank's
// position, every line carrying the call's flag, so a reader needs no fence and no separate flag.
//
// A block takes rows blockIdx.x, + gridDim.x, ...: it first pushes every one of its rows to every
// peer, then, row by row, waits for the peers' lines, reduces in rank order with its own values,
// adds the residual and finishes the row (fused_device.h). The weight, the first row's input and
// residual (and the FP8 scale) are loaded together with the counter, before any wait.
#include "collectives/fused_device.h"
#include "collectives/ll128_device.h"
#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::coll::fused {
namespace {

template <typename T, bool Quant>
__global__ void __launch_bounds__(kFusedThreadsMax) fused_ll_kernel(FusedArgs f) {
  constexpr int V = WordOf<T>::V, E = WordOf<T>::E;
  const LaunchArgs& a = f.a;
  const size_t hidden = f.hidden, units = hidden / V, rows = f.tokens;
  const size_t row0 = blockIdx.x, step = gridDim.x;
  const T* in = static_cast<const T*>(a.src);
  const T* resid = static_cast<const T*>(f.residual_in);
  const T* weight = static_cast<const T*>(f.weight);
  const int slots = f.slots;
  auto unit = [&](int k) { return size_t(threadIdx.x) + size_t(k) * blockDim.x; };
  auto has = [&](int k) { return k < slots && unit(k) < units; };
  auto word_at = [&](int k, int h) { return has(k) ? unit(k) * V + size_t(h) * E : kNoWord; };
  Pack16 own[kFusedSlots], res[kFusedSlots], wt[kFusedSlots];
  float scale = 1.f;
  auto load_row = [&](size_t row) {
#pragma unroll
    for (int k = 0; k < kFusedSlots; ++k)
      if (has(k)) {
        own[k] = load16(in + row * hidden + unit(k) * V);
        res[k] = load16(resid + row * hidden + unit(k) * V);
      }
  };
  uint64_t seq0;
  if (!kernel_begin(a, seq0, [&] {
#pragma unroll
        for (int k = 0; k < kFusedSlots; ++k)
          if (has(k)) wt[k] = load16(weight + unit(k) * V);
        if (Quant) scale = *f.scale;
        if (row0 < rows) load_row(row0);
      }))
    return;
  const uint64_t seq = seq0 + 1;
  const uint32_t flag = uint32_t(seq);
  const int slot = int(seq & 1);
  const int me = a.rank, n = a.world;
  const DataLayout& L = a.layout;

  // 1. Every row of this block into every peer's LL area (word w of the message at line w).
  for (size_t row = row0; row < rows; row += step) {
#pragma unroll
    for (int k = 0; k < kFusedSlots; ++k) {
      if (!has(k)) continue;
      const Pack16 v = row == row0 ? own[k] : load16(in + row * hidden + unit(k) * V);
      const size_t w = (row * units + unit(k)) * 2;
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        char* line = a.data[p] + L.ll(slot, me) + w * 16;
        store_ll(line, uint32_t(v.lo), uint32_t(v.lo >> 32), flag);
        store_ll(line + 16, uint32_t(v.hi), uint32_t(v.hi >> 32), flag);
      }
    }
  }

  // 2. Row by row: every rank's words in rank order, the residual, then the norm.
  bool ok = true;
  for (size_t row = row0; row < rows; row += step) {
    if (row != row0) load_row(row);
#pragma unroll
    for (int k = 0; k < kFusedSlots; ++k) {
      if (!has(k)) continue;
      const size_t w = (row * units + unit(k)) * 2;
      float acc0[E], acc1[E];
      for (int r = 0; r < n; ++r) {
        uint64_t v0 = own[k].lo, v1 = own[k].hi;
        if (r != me) {
          const char* line = a.data[me] + L.ll(slot, r) + w * 16;
          if (ok) ok = take_ll(a, line, flag, r, v0);
          if (ok) ok = take_ll(a, line + 16, flag, r, v1);
          if (!ok) v0 = v1 = 0;
        }
        fold<T>(acc0, v0, r == 0);
        fold<T>(acc1, v1, r == 0);
      }
      res[k].lo = residual_word<T>(acc0, res[k].lo);
      res[k].hi = residual_word<T>(acc1, res[k].hi);
    }
    if (!finish_row<T, Quant>(f, row, res, wt, scale, !ok, word_at)) break;
  }
  kernel_end(a, seq);  // every thread gets here (finish_row's answer is the block's)
}

// LL128: row r's lines start at line r * lines_per_row of this rank's position in the peer's area;
// pass k of warp w holds line group k * warps + w of the row, lane j of a line its 16-byte part j
// (ll128_device.h: words 2j and 2j + 1; the flag lane word 14 and the flag).
template <typename T, bool Quant>
__global__ void __launch_bounds__(kFusedThreadsMax) fused_ll128_kernel(FusedArgs f) {
  using namespace ll128;
  constexpr int E = WordOf<T>::E;
  const LaunchArgs& a = f.a;
  const size_t row_bytes = f.hidden * sizeof(T), row_words = row_bytes / 8, rows = f.tokens;
  const size_t lpr = fused_ll128_lines_per_row(row_bytes);
  const size_t row0 = blockIdx.x, step = gridDim.x;
  const size_t warps = blockDim.x / kWarpSize, warp = threadIdx.x / kWarpSize;
  const int slots = f.slots;
  auto line_of = [&](int k) { return line_in(size_t(k) * warps + warp); };
  auto word_at = [&](int k, int h) {
    if (k >= slots || line_of(k) >= lpr || (h == 1 && flag_lane())) return kNoWord;
    const size_t w = line_of(k) * kLineWords + 2 * size_t(pos()) + size_t(h);
    return w < row_words ? w * E : kNoWord;
  };
  auto row_of = [&](const void* base, size_t row) { return static_cast<const char*>(base) + row * row_bytes; };
  Pack16 own[kFusedSlots], res[kFusedSlots], wt[kFusedSlots];
  float scale = 1.f;
  // Words past the row (and the flag lane's second word) load as 0 (load_words).
  auto load_row = [&](size_t row) {
#pragma unroll
    for (int k = 0; k < kFusedSlots; ++k)
      if (k < slots) {
        load_words(row_of(a.src, row), row_bytes, true, line_of(k), own[k].lo, own[k].hi);
        load_words(row_of(f.residual_in, row), row_bytes, true, line_of(k), res[k].lo, res[k].hi);
      }
  };
  uint64_t seq0;
  if (!kernel_begin(a, seq0, [&] {
#pragma unroll
        for (int k = 0; k < kFusedSlots; ++k)
          if (k < slots) load_words(static_cast<const char*>(f.weight), row_bytes, true, line_of(k), wt[k].lo, wt[k].hi);
        if (Quant) scale = *f.scale;
        if (row0 < rows) load_row(row0);
      }))
    return;
  const uint64_t seq = seq0 + 1;
  const int slot = int(seq & 1);
  const int me = a.rank, n = a.world;
  const DataLayout& L = a.layout;
  auto area = [&](int owner, int from, size_t row) { return a.data[owner] + L.ll128(slot, from) + row * lpr * kLl128Line; };

  // 1. Every row of this block into every peer's LL128 area; the 8 lanes of a line store together.
  for (size_t row = row0; row < rows; row += step) {
#pragma unroll
    for (int k = 0; k < kFusedSlots; ++k) {
      if (k >= slots) continue;
      const size_t l = line_of(k);
      uint64_t x0 = own[k].lo, x1 = own[k].hi;
      if (row != row0) load_words(row_of(a.src, row), row_bytes, true, l, x0, x1);
      if (l >= lpr) continue;
      for (int p = 0; p < n; ++p)
        if (p != me) put(area(p, me, row), l, x0, x1, seq);
    }
  }

  // 2. Row by row. Every lane of a warp takes part in each wait (take), lines past the row included.
  bool ok = true;  // the same on every lane of a warp (take)
  for (size_t row = row0; row < rows; row += step) {
    if (row != row0) load_row(row);
#pragma unroll
    for (int k = 0; k < kFusedSlots; ++k) {
      if (k >= slots) continue;
      const size_t l = line_of(k);
      float acc0[E], acc1[E];
      for (int r = 0; r < n; ++r) {
        uint64_t v0 = own[k].lo, v1 = own[k].hi;
        if (r != me) {
          if (ok) ok = take(a, area(me, r, row), l, l < lpr, seq, r, v0, v1);
          if (!ok) v0 = v1 = 0;
        }
        fold<T>(acc0, v0, r == 0);
        fold<T>(acc1, v1, r == 0);
      }
      res[k].lo = residual_word<T>(acc0, res[k].lo);
      res[k].hi = residual_word<T>(acc1, res[k].hi);
    }
    if (!finish_row<T, Quant>(f, row, res, wt, scale, !ok, word_at)) break;
  }
  kernel_end(a, seq);
}

}  // namespace

void launch_fused_ll(const FusedArgs& f, DevStream st) {
  bool known = with_fused_type(f.a.dtype, [&](auto t) {
    using T = decltype(t);
    if (f.quant_out) launch_fused_kernel(fused_ll_kernel<T, true>, f, st);
    else launch_fused_kernel(fused_ll_kernel<T, false>, f, st);
  });
  if (!known) throw InvalidArgument(common::format("allreduce_add_rmsnorm: unknown dtype code {}", f.a.dtype));
}

void launch_fused_ll128(const FusedArgs& f, DevStream st) {
  if (f.a.threads % kWarpSize != 0)
    throw InvalidArgument(common::format(
        "allreduce_add_rmsnorm LL128 launch: {} threads per block is not a multiple of {}", f.a.threads, kWarpSize));
  bool known = with_fused_type(f.a.dtype, [&](auto t) {
    using T = decltype(t);
    if (f.quant_out) launch_fused_kernel(fused_ll128_kernel<T, true>, f, st);
    else launch_fused_kernel(fused_ll128_kernel<T, false>, f, st);
  });
  if (!known) throw InvalidArgument(common::format("allreduce_add_rmsnorm: unknown dtype code {}", f.a.dtype));
}

}  // namespace peerlink::coll::fused
