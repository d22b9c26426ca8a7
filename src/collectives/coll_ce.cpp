// Copy-engine path of every collective but all_to_all_v (Options::<collective>_algo = "ce", or for
// all_gather, broadcast, all_to_all auto from Options::coll_ce_min): the pieces of coll_plan.h travel through the same registered
// scratch and step protocol as the push kernel, but the bytes are moved by cudaMemcpyAsync (the
// copy engines) and the only kernel is a one-block flag step (coll_kernels.cu) between copies:
//
//   user stream A:  [entry step] | push copies k | wait(outputs k-1) | flag step k | record ready k
//   stream B (ce_streams[0]):  own piece | ... wait(ready k) | scratch->output copies k | record done k
//   lanes 1.. (ce_streams[l]): fork from A | their share of the push copies k | join into A
//
// Step k writes the receivers' slot k & 1 (the entry step aligns the device counter so that step k
// has an even sequence number + k; the addresses are the host's, the sequence numbers the device's,
// so a captured graph replays correctly). Two-slot argument of layout.h, per step: a rank signals
// step k only after its scratch->output copies of step k-1 are done (A waits for B), and pushes
// step k+1 (into slot (k+1)&1, the slot of step k-1) only after it saw every peer's step k flag; so
// no push overwrites a slot its receiver still reads. The next call (any collective) starts after
// A joined B, so it finds this call's copies done, as after a kernel.
// Capture-compatible: B and the lanes enter and leave the caller's capture by events recorded on
// A (fork/join), and nothing here synchronizes with the host.
#include <algorithm>
#include <chrono>

#include "collectives/coll_launch.h"
#include "collectives/coll_state.h"
#include "common/log.h"
#include "gpu/runtime.h"
#include "peerlink/errors.h"
#include "transport/services.h"

namespace peerlink::coll {
namespace {

enum CeEvent { kCeFork = 0, kCeReady = 1, kCeDone = 2, kCeLaneFork = 3, kCeLaneJoin = 4 };  // join: 4 + l - 1

LaunchArgs step_args(const CollState& st) {
  LaunchArgs a;
  fill_state_args(st, a);
  a.blocks = 1;
  return a;
}

}  // namespace

void ce_collective(CollState& st, const CollDesc& d, int dtype, int op, const void* src, void* dst, void* stream) {
  if (d.kind == kAllToAllV)  // its step count is agreed on the device
    throw InvalidArgument("collective copy-engine path: all_to_all_v has none");
  gpu::DeviceGuard dg(st.device);
  const Options& o = st.svc->options();
  const size_t e = d.elem, cap = st.layout.cap;
  const size_t want = o.coll_ce_chunk_bytes ? std::min(o.coll_ce_chunk_bytes, cap) : cap;
  const size_t C = chunk_elems(want, e);
  if (C == 0)
    throw InvalidArgument(common::cat("collective copy-engine path: a chunk of ", want, " bytes holds no 16-byte unit"));
  const size_t steps = (local_max_piece(d) + C - 1) / C;  // the same on every rank for these kinds
  const int me = st.rank, n = st.world, lanes = std::max(1, st.ce_lanes);
  const char* s = static_cast<const char*>(src);
  char* out = static_cast<char*>(dst);
  gpu::Stream A = stream, B = st.ce_streams[0].get();
  auto ev = [&](int i) { return st.ce_events[i].get(); };
  const LaunchArgs a = step_args(st);

  gpu::event_record(ev(kCeFork), A);
  gpu::stream_wait_event(B, ev(kCeFork));
  const bool red = reducing(d.kind);
  const int rblocks = whole_gpu_blocks(st);
  if (!red) {  // own piece, never through the scratch (the reducing kinds read it in place)
    Piece sp = send_piece(d, me), rp = recv_piece(d, me);
    const char* from = s + sp.src_off * e;
    char* to = out + rp.dst_off * e;
    if (rp.count && from != to) gpu::memcpy_async(to, from, rp.count * e, B);
    gpu::event_record(ev(kCeDone), B);
  }
  launch_ce_step(a, true, A);
  for (size_t k = 0; k < steps; ++k) {
    const int slot = int(k & 1);
    if (lanes > 1) {
      gpu::event_record(ev(kCeLaneFork), A);
      for (int l = 1; l < lanes; ++l) gpu::stream_wait_event(st.ce_streams[l].get(), ev(kCeLaneFork));
    }
    for (int p = 0; p < n; ++p) {  // chunk k of every outgoing piece, split over the lanes
      if (p == me) continue;
      Piece sp = send_piece(d, p);
      size_t lo = 0, m = sub_range(sp.count, k, C, 0, C, &lo);
      if (!m) continue;
      const size_t bytes = m * e, part = round_up((bytes + lanes - 1) / lanes, 16);
      const char* from = s + (sp.src_off + lo) * e;
      char* to = st.data[p] + st.layout.input(slot, me);
      for (int l = 0; l < lanes; ++l) {
        size_t off = size_t(l) * part;
        if (off >= bytes) break;
        gpu::memcpy_async(to + off, from + off, std::min(part, bytes - off), l == 0 ? A : st.ce_streams[l].get());
      }
    }
    if (lanes > 1)
      for (int l = 1; l < lanes; ++l) {
        gpu::event_record(ev(kCeLaneJoin + l - 1), st.ce_streams[l].get());
        gpu::stream_wait_event(A, ev(kCeLaneJoin + l - 1));
      }
    if (k > 0) gpu::stream_wait_event(A, ev(kCeDone));  // our reads of slot (k-1)&1 are done
    launch_ce_step(a, false, A);
    gpu::event_record(ev(kCeReady), A);
    gpu::stream_wait_event(B, ev(kCeReady));
    if (red) {  // chunk k of our piece: own input and the peers' scratch, reduced in rank order
      Piece rp = recv_piece(d, me);
      size_t lo = 0, m = sub_range(rp.count, k, C, 0, C, &lo);
      if (m) {
        CeReduceArgs ra;
        for (int r = 0; r < n; ++r)
          ra.ins[r] = r == me ? static_cast<const void*>(s + (rp.src_off + lo) * e) : st.data[me] + st.layout.input(slot, r);
        ra.nin = n;
        ra.out = out + (rp.dst_off + lo) * e;
        ra.count = m;
        ra.dtype = dtype;
        ra.op = op;
        // ~8 16-byte units per thread, at most one block per SM (UNMEASURED)
        ra.blocks = int(std::min<size_t>(rblocks, std::max<size_t>(1, m * e / (512 * 128))));
        ra.per_block = round_up((m + ra.blocks - 1) / ra.blocks, 16 / e);
        launch_ce_reduce(ra, B);
      }
    }
    for (int r = 0; r < n && !red; ++r) {  // chunk k of every incoming piece, scratch -> output
      if (r == me) continue;
      Piece rp = recv_piece(d, r);
      size_t lo = 0, m = sub_range(rp.count, k, C, 0, C, &lo);
      if (!m) continue;
      gpu::memcpy_async(out + (rp.dst_off + lo) * e, st.data[me] + st.layout.input(slot, r), m * e, B);
    }
    gpu::event_record(ev(kCeDone), B);
  }
  gpu::stream_wait_event(A, ev(kCeDone));  // join: B's copies (own piece included) precede what follows
}

}  // namespace peerlink::coll
