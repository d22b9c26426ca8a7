// The fused allreduce + residual add + RMSNorm (peerlink/fused.h): data paths, the per-call
// geometry every rank derives alike from (tokens, hidden, world, the agreed grid cap and scratch
// size), and the kernel arguments. Shared by host code (fused.cpp, host_fused.cpp) and the kernels.
//
// Every path hands whole rows to one block (a row's sum of squares is a block reduction): block b
// of a grid of G takes rows b, b + G, b + 2G, ... of the call (one-shot) or of every shard (two-shot).
// Inside a row, thread t holds the 16-byte units t, t + T, ... (at most kFusedSlots of them) in
// registers, from the load of its input, residual and weight until the outputs are stored.
//   LL      one-shot through LL lines (layout.h): unit u of row r is words 2(r*units + u) and the next
//           of the message, each line carrying the call's flag; no barrier, no fence.
//   LL128   one-shot through LL128 lines: each row starts a new line (lines_per_row lines of 15
//           words); the lanes of a warp move 4 whole lines per store (ll128_device.h).
//   OneShot one-shot through the flag-based scratch: every rank pushes its rows of a step into
//           every peer's input region, one flag per block, then reduces; steps of as many rows as
//           a scratch position holds.
//   TwoShot reduce-scatter by rows (each step's rows cut into one shard per rank), the owner adds
//           the residual and pushes its residual_out rows into every peer's result region, every
//           rank computes the norm of every row from those bits: the norm's inputs, and so its
//           outputs, are bitwise the same everywhere.
#pragma once
#include <cstddef>
#include <cstdint>

#include "collectives/device_launch.h"
#include "collectives/host_device.h"

namespace peerlink::coll {

enum FusedPath : int { kFusedLocal = 0, kFusedLL = 1, kFusedLL128 = 2, kFusedOneShot = 3, kFusedTwoShot = 4 };

constexpr int kFusedThreadsMax = 512;  // __launch_bounds__ of the fused kernels (128 registers a thread)
constexpr int kFusedSlots = 4;         // 16-byte units (LL128: lines) per thread and row, at most
constexpr size_t kFusedLl128LinesPerStore = 4;  // CUDA warp of 32 lanes, 8 lanes a line (LL128 is CUDA-only)
constexpr size_t kLl128Words = 15;              // data words of an LL128 line (layout.h: 120 bytes)

struct FusedGeometry {
  int threads = 0;
  int slots = 0;
};

// Unit paths (LL, OneShot, TwoShot, the local kernel): threads a multiple of 64 (CUDA's and HIP's
// warps), enough for one unit each up to 512, then up to kFusedSlots units each.
PL_HD FusedGeometry fused_unit_geometry(size_t units) {
  FusedGeometry g;
  size_t t = (units + 63) / 64 * 64;
  g.threads = static_cast<int>(t < size_t(kFusedThreadsMax) ? t : size_t(kFusedThreadsMax));
  g.slots = static_cast<int>((units + size_t(g.threads) - 1) / size_t(g.threads));
  return g;
}

PL_HD size_t fused_ll128_lines_per_row(size_t row_bytes) { return (row_bytes / 8 + kLl128Words - 1) / kLl128Words; }

// LL128: one warp per group of 4 lines of the row, at most 16 warps, passes = slots. slots 0 when a
// row needs more than kFusedSlots passes (the path is then not taken).
PL_HD FusedGeometry fused_ll128_geometry(size_t row_bytes) {
  FusedGeometry g;
  const size_t groups = (fused_ll128_lines_per_row(row_bytes) + kFusedLl128LinesPerStore - 1) / kFusedLl128LinesPerStore;
  const size_t warps = groups < 16 ? groups : 16;
  g.threads = static_cast<int>(32 * warps);
  const size_t passes = (groups + warps - 1) / warps;
  g.slots = passes <= size_t(kFusedSlots) ? static_cast<int>(passes) : 0;
  return g;
}

// Rows [lo, lo + n) of a step of `len` rows that rank q owns in the two-shot path (ceil(len / world)
// rows each, the last ranks' shards shorter or empty).
struct RowRange {
  size_t lo = 0, n = 0;
};
PL_HD RowRange fused_shard(size_t len, int world, int q) {
  const size_t sh = (len + size_t(world) - 1) / size_t(world);
  RowRange r;
  r.lo = size_t(q) * sh < len ? size_t(q) * sh : len;
  const size_t hi = r.lo + sh < len ? r.lo + sh : len;
  r.n = hi - r.lo;
  return r;
}

struct FusedArgs {
  // rank, world, blocks, threads, layout, data, flags, error, timeout_ns, pdl, dtype; src = input.
  LaunchArgs a;
  const void* residual_in = nullptr;
  const void* weight = nullptr;
  void* norm_out = nullptr;     // may be null (FP8 form)
  void* residual_out = nullptr;
  void* quant_out = nullptr;    // FP8 form: e4m3 bytes; else null
  const float* scale = nullptr;  // FP8 form
  size_t tokens = 0, hidden = 0;
  float eps = 0.f, weight_bias = 0.f;
  int path = kFusedLocal;
  int slots = 1;               // units (LL128: passes) per thread and row
  size_t rows_per_step = 0;    // OneShot: rows per step; TwoShot: rows per step of all shards together
};

// Enqueues the fused call on `stream` (cudaStream_t / hipStream_t); f.a.blocks x f.a.threads.
// Throws InvalidArgument / GpuError when the launch fails. Host-only builds: UnsupportedError.
void launch_fused(const FusedArgs& f, void* stream);

}  // namespace peerlink::coll
