// Which path a collective takes (collectives.cpp asks once per call): the options' forced
// algorithm, the zero-copy windows, and the auto rules with the measurements that set them.
#include "collectives/coll_choice.h"

#include <algorithm>

#include "collectives/coll_state.h"
#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "transport/services.h"

namespace peerlink::coll {

// The algorithm Options force on this kind of collective (Auto unless set; an enum parsed once, when
// the Options were read).
static CollAlgo forced_algo(const Options& o, int kind) {
  switch (kind) {
    case coll::kAllGather: return o.all_gather_algo;
    case coll::kReduceScatter: return o.reduce_scatter_algo;
    case coll::kBroadcast: return o.broadcast_algo;
    case coll::kReduce: return o.reduce_algo;
    default: return o.all_to_all_algo;
  }
}

// Auto selection. LL (one step, each 8 bytes travel with a flag: twice the bytes on the link, no
// separate flag latency) for pieces up to Options::coll_ll_max bytes (default 64 KB, UNMEASURED:
// allreduce's LL won up to 512 KB on 2x H200, where the reduction also hid latency), the push path
// above; copy engines (coll_ce.cpp) for all_gather, broadcast and all_to_all pieces of at least
// Options::coll_ce_min bytes (default 0: never, until a sweep sets it; reduce and reduce_scatter
// take them only when forced: their reduction kernel per step is a separate guess). all_to_all_v always pushes:
// its piece sizes differ per rank, and ranks must choose alike without talking. The host backend
// has no copy-engine path: "ce" runs the push plan there (same pieces and chunks).
// Auto: pieces above this many bytes (and up to allreduce_ll128_max) take LL128 lines where the
// communicator has them (every pair NVLink or one GPU); LL below.
constexpr size_t kCollLl128Above = size_t(128) << 10;
// The host backend's LL128 area holds 16 KB pieces (layout.h): from 4 KB, so that CI's auto runs
// take LL, LL128 and push by size.
constexpr size_t kHostLl128Above = size_t(4) << 10;

static bool ce_kind(int kind) { return kind == coll::kAllGather || kind == coll::kBroadcast || kind == coll::kAllToAll; }
// The zero-copy path (coll_zero_copy.cpp): the moving kinds write the peers' recvbufs, the
// reducing kinds read the peers' sendbufs; all_to_all_v has none.
bool zc_kind(int kind) { return kind != coll::kAllToAllV; }

// Auto selection of the reducing kinds' pull (reads of the peers' sendbufs through the window):
// from pieces of this many bytes. 2x H200, bf16, graph, us push / pull / NCCL best:
// reduce_scatter 16 MB 35.4 / 38.1 / 49.0, 64 MB 134.9 / 114.4 / 165.1, 256 MB 498.4 /
// 414.2 / 590.7 (pieces: half); reduce 64 MB 187.3 / 196.0 / 197.0, 256 MB 752.6 / 733.1 / 738.1,
// 128 MB: benchmarks/results/2026-11-26-h200x2.md.
static size_t pull_min(int kind) { return kind == coll::kReduceScatter ? size_t(32) << 20 : size_t(128) << 20; }

// The buffer whose window the zero-copy path uses, and its bytes on this rank: recvbuf for the
// moving kinds, sendbuf for the reducing ones.
const void* zc_buffer(const coll::CollDesc& d, const void* src, const void* dst, size_t* bytes) {
  const bool whole = d.kind == coll::kBroadcast || d.kind == coll::kReduce;
  *bytes = (whole ? 1 : size_t(d.world)) * d.count * d.elem;
  return coll::reducing(d.kind) ? src : dst;
}

// Auto takes the zero-copy path for pieces this large (and forced zero-copy always does); `forced`
// is the collective's parsed algo option.
static bool zc_wanted(const Options& o, const CollCall& c, CollAlgo forced) {
  if (forced == CollAlgo::ZeroCopy) return true;
  // reduce on 3+ ranks: the zero-copy root pulls every peer's whole sendbuf (4x H200:
  // 256 MB 2177 us against NCCL's 752); the two-hop plan's root takes the buffer in once.
  if (c.d.kind == coll::kReduce && c.d.world >= 3) return false;
  const size_t piece_bytes = coll::local_max_piece(c.d) * c.d.elem;
  return forced == CollAlgo::Auto && o.coll_zero_copy_min > 0 &&
         piece_bytes >= (coll::reducing(c.d.kind) ? pull_min(c.d.kind) : o.coll_zero_copy_min);
}

// Options::coll_graph_register: a zero-copy buffer in no registered window gets a window of its
// own when the call is captured into a graph (or, with 2, on every call) and the zero-copy path
// would take it. Every input of this choice is the same on every rank (the counts, the options,
// being captured: graph_windows.h); a buffer in a window that is not zero-copy keeps that window.
const coll::Window* graph_window_for(coll::CollState& st, const CollCall& c, const void* buf, size_t bytes,
                                     const coll::Window* w, void* stream) {
  const Options& o = st.svc().options();
  if (!st.graph_windows().wins.empty()) coll::release_unheld_graph_windows(st);
  if (w || !buf || o.coll_graph_register == 0 || st.world() < 2 || !zc_kind(c.d.kind) || c.d.count == 0 ||
      !zc_wanted(o, c, forced_algo(o, c.d.kind)))
    return w;
  const bool capturing = !st.host() && gpu::stream_is_capturing(stream);
  if (!capturing && o.coll_graph_register != 2) return w;
  return coll::graph_window(st, buf, bytes, capturing ? stream : nullptr);
}

// Zero-copy: recvbuf (moving kinds) or sendbuf (reducing kinds) in a registered window
// (peerlink/windows.h) that every rank mapped; the window contract makes this choice the same on
// every rank. Auto takes it for the moving kinds from Options::coll_zero_copy_min bytes per piece
// (measured: options.h), for the reducing kinds from pull_min() (0 = never, for both).
CollAlgo choose_algo(const coll::CollState& st, const CollCall& c, const coll::Window* w) {
  const Options& o = st.svc().options();
  CollAlgo forced = forced_algo(o, c.d.kind);
  size_t piece_bytes = coll::local_max_piece(c.d) * c.d.elem;
  const bool zc_ok = w && w->zero_copy && zc_kind(c.d.kind) && st.world() >= 2;
  if (forced == CollAlgo::ZeroCopy) {
    if (!zc_kind(c.d.kind))
      throw InvalidArgument(
          common::format("{}: zero_copy forced (Options) but all_to_all_v has no zero-copy path", c.name));
    if (st.world() < 2) return CollAlgo::Push;
    if (!zc_ok) {
      size_t bytes = 0;
      const void* b = zc_buffer(c.d, c.src, c.dst, &bytes);
      throw InvalidArgument(
          common::format("{}: zero_copy forced (Options) but {}{} ({} bytes) is not inside a window every rank "
                         "registered and exported (peerlink::register_window)",
                         c.name, coll::reducing(c.d.kind) ? "sendbuf " : "recvbuf ", b, bytes));
    }
    return CollAlgo::ZeroCopy;
  }
  if (forced == CollAlgo::Auto && zc_ok && zc_wanted(o, c, forced)) return CollAlgo::ZeroCopy;
  // An empty piece still sends a token line: LL needs an LL area (allreduce_ll_max > 0).
  if (forced == CollAlgo::LL) {
    if (piece_bytes > st.ll_max() || st.ll_max() == 0)
      throw InvalidArgument(common::format(
          "{}: LL forced (Options) but a piece of {} bytes exceeds the LL area's {} bytes (allreduce_ll_max)", c.name,
          piece_bytes, st.ll_max()));
    return CollAlgo::LL;
  }
  if (c.d.kind == coll::kAllToAllV) return CollAlgo::Push;
  if (forced == CollAlgo::LL128) {
    if (st.ll128_max() == 0 || piece_bytes > st.ll128_max())
      throw InvalidArgument(common::format(
          "{}: LL128 forced (Options) but {}", c.name,
          st.ll128_max() == 0
              ? std::string("this communicator has no LL128 lines (HIP, allreduce_ll128_max "
                            "0, or a pair that is neither NVLink nor one GPU)")
              : common::format("a piece of {} bytes exceeds the LL128 area's {} bytes (allreduce_ll128_max)",
                               piece_bytes, st.ll128_max())));
    return CollAlgo::LL128;
  }
  if (forced == CollAlgo::CopyEngine) return st.host() || st.world() < 2 ? CollAlgo::Push : CollAlgo::CopyEngine;
  if (forced == CollAlgo::Push) return CollAlgo::Push;
  // Options::validate refused two_hop for the other kinds when the communicator was made.
  if (forced == CollAlgo::TwoHop) return st.world() < 2 ? CollAlgo::Push : CollAlgo::TwoHop;
  if (!st.host() && st.world() >= 2 && ce_kind(c.d.kind) && o.coll_ce_min > 0 && piece_bytes >= o.coll_ce_min)
    return CollAlgo::CopyEngine;
  const size_t ll128_above = st.host() ? kHostLl128Above : kCollLl128Above;
  if (st.ll128_max() > 0 && piece_bytes > ll128_above && piece_bytes <= st.ll128_max()) return CollAlgo::LL128;
  size_t ll_max = std::min(st.ll_max(), o.coll_ll_max);  // host: st.ll_max() is its 16 KB area
  if (ll_max > 0 && piece_bytes <= ll_max) return CollAlgo::LL;
  // Rooted kinds on 3+ ranks: the push path's root link carries the buffer world - 1 times, the
  // two-hop plan's about once for one more step (coll_plan.h). Chosen by that count: NOT YET
  // MEASURED on 3+ GPUs (its correctness is tested on one and two GPUs).
  return coll::rooted(c.d.kind) && st.world() >= 3 ? CollAlgo::TwoHop : CollAlgo::Push;
}

}  // namespace peerlink::coll
