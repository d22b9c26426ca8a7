// The data path and grid of a fused allreduce + residual add + RMSNorm call (fused_plan.h), and its
// dispatch: the host backend's data flow, or one kernel on the caller's stream in the
// communicator's stream order. Every input of the choice (sizes, world size, options, the state's
// agreed grid cap, scratch and line areas) is the same on every rank, so every rank launches the
// same path and grid.
#include <algorithm>

#include "collectives/coll_state.h"
#include "collectives/fused_call.h"
#include "collectives/fused_plan.h"
#include "common/format.h"
#include "gpu/owners.h"
#include "gpu/runtime.h"
#include "peerlink/collectives.h"
#include "peerlink/errors.h"
#include "transport/services.h"

namespace peerlink::coll {
namespace {

using common::format;

// Auto: two-shot where the allreduce takes it over one-shot (allreduce.cpp's measured crossovers,
// by the bytes of one input: the fused call moves what the allreduce moves, its two-shot gathers
// residual_out rows instead of sums). With 2 ranks never: both move the input once per rank, and
// two-shot pays a second flag round. 3+ ranks: not measured for the fused call. The host backend
// switches at 64 KB so that CI runs both.
bool two_shot_auto(size_t bytes, int world, bool host, bool nvlink) {
  if (host) return bytes > (size_t(64) << 10);
  if (world <= 2) return false;
  const size_t one_shot_max = world > 4 ? (size_t(64) << 10) : nvlink ? (size_t(1) << 20) : (size_t(256) << 10);
  return bytes > one_shot_max;
}

// One-shot calls above this many bytes take LL128 lines rather than LL lines when both can, as
// allreduce.cpp's kLl128Above (measured there for the allreduce).
constexpr size_t kLl128Above = size_t(128) << 10;

// Path, grid and steps of a GPU call.
void plan(const CollState& st, const FusedCall& c, bool two_shot, FusedArgs& f) {
  const size_t elem = dtype_size(static_cast<DataType>(c.dtype));
  const size_t row_bytes = c.hidden * elem, bytes = c.tokens * row_bytes, units = row_bytes / 16;
  const size_t per_rank = st.layout().cap / row_bytes;  // rows one scratch position holds (>= 1: checked)
  const size_t grid = size_t(whole_gpu_blocks(st));
  auto blocks = [&](size_t rows) { return static_cast<int>(std::max<size_t>(1, std::min(rows, grid))); };
  FusedGeometry g = fused_unit_geometry(units);
  if (two_shot) {
    f.path = kFusedTwoShot;
    f.rows_per_step = per_rank * size_t(st.world());
    const size_t first = std::min(c.tokens, f.rows_per_step);
    f.a.blocks = blocks((first + size_t(st.world()) - 1) / size_t(st.world()));
  } else {
    const FusedGeometry g128 = fused_ll128_geometry(row_bytes);
    const bool ll128_ok = st.ll128_max() > 0 && bytes <= st.ll128_max() && g128.slots > 0 &&
                          c.tokens * fused_ll128_lines_per_row(row_bytes) * kLl128Line <= st.layout().ll128_cap;
    const bool ll_ok = bytes <= st.ll_max() && !(ll128_ok && bytes > kLl128Above);
    if (ll_ok || ll128_ok) {
      f.path = ll_ok ? kFusedLL : kFusedLL128;
      if (!ll_ok) g = g128;
      f.a.blocks = blocks(c.tokens);
    } else {
      f.path = kFusedOneShot;
      f.rows_per_step = per_rank;
      f.a.blocks = blocks(std::min(c.tokens, per_rank));
    }
  }
  f.a.threads = g.threads;
  f.slots = g.slots;
}

// The host backend's data flow; a failure mid-protocol leaves the ranks out of step, as allreduce's.
void run_host(CollState& st, const FusedCall& c, bool two_shot) {
  try {
    host_fused(st, c, two_shot);
  } catch (...) {
    st.set_broken_by_current_exception(c.name);
    throw;
  }
}

}  // namespace

// fused.cpp: arguments checked, tokens > 0, a row fits a scratch position; caller holds st.lock_calls().
void run_fused(CollState& st, const FusedCall& c, FusedArgs f, void* stream) {
  const AllreduceAlgo forced = st.svc().options().fused_algo;  // validated: Auto, OneShot or TwoShot
  const size_t bytes = c.tokens * c.hidden * dtype_size(static_cast<DataType>(c.dtype));
  const bool two_shot = forced == AllreduceAlgo::TwoShot ||
                        (forced != AllreduceAlgo::OneShot && two_shot_auto(bytes, st.world(), st.host(), st.nvlink_all()));
  if (st.host()) return run_host(st, c, two_shot);
  gpu::DeviceGuard dg(st.device());
  plan(st, c, two_shot, f);
  fill_state_args(st, f.a);
  f.a.pdl = st.pdl();
  st.launch_in_order(stream, [&] { launch_fused(f, stream); });
}

}  // namespace peerlink::coll
