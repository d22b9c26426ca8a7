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
#include "common/format.h"
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

// One call's fixed inputs, shared by its steps.
struct CeCall {
  CollState& st;
  const CollDesc& d;
  int dtype, op;
  size_t e, C;        // element bytes, elements per chunk
  int me, n, lanes;
  const char* src;
  char* out;
  gpu::Stream A, B;   // the user's stream; the receive stream (ce_stream(0))
  gpu::Event ev(int i) const { return st.ce_event(i); }
};

// Step k's pushes on A and the extra lanes: chunk k of every outgoing piece into its receiver's
// scratch slot k & 1, each split over the lanes (forked from A and joined back into it).
void push_step(const CeCall& c, size_t k) {
  const int slot = int(k & 1);
  if (c.lanes > 1) {
    gpu::event_record(c.ev(kCeLaneFork), c.A);
    for (int l = 1; l < c.lanes; ++l) gpu::stream_wait_event(c.st.ce_stream(l), c.ev(kCeLaneFork));
  }
  for (int p = 0; p < c.n; ++p) {
    if (p == c.me) continue;
    Piece sp = send_piece(c.d, p);
    size_t lo = 0, m = sub_range(sp.count, k, c.C, 0, c.C, &lo);
    if (!m) continue;
    const size_t bytes = m * c.e, part = round_up((bytes + c.lanes - 1) / c.lanes, 16);
    const char* from = c.src + (sp.src_off + lo) * c.e;
    char* to = c.st.data(p) + c.st.layout().input(slot, c.me);
    for (int l = 0; l < c.lanes; ++l) {
      size_t off = size_t(l) * part;
      if (off >= bytes) break;
      gpu::memcpy_async(to + off, from + off, std::min(part, bytes - off), l == 0 ? c.A : c.st.ce_stream(l));
    }
  }
  for (int l = 1; l < c.lanes; ++l) {
    gpu::event_record(c.ev(kCeLaneJoin + l - 1), c.st.ce_stream(l));
    gpu::stream_wait_event(c.A, c.ev(kCeLaneJoin + l - 1));
  }
}

// Step k's receive side on B, once every peer's step-k flag is seen: the reducing kinds reduce
// chunk k of our piece (own input and the peers' scratch, in rank order), the others copy chunk k
// of every incoming piece out of the scratch.
void receive_step(const CeCall& c, size_t k, int rblocks) {
  const int slot = int(k & 1);
  const char* mine = c.st.data(c.me);
  if (reducing(c.d.kind)) {
    Piece rp = recv_piece(c.d, c.me);
    size_t lo = 0, m = sub_range(rp.count, k, c.C, 0, c.C, &lo);
    if (!m) return;
    CeReduceArgs ra;
    for (int r = 0; r < c.n; ++r)
      ra.ins[r] = r == c.me ? static_cast<const void*>(c.src + (rp.src_off + lo) * c.e) : mine + c.st.layout().input(slot, r);
    ra.nin = c.n;
    ra.out = c.out + (rp.dst_off + lo) * c.e;
    ra.count = m;
    ra.dtype = c.dtype;
    ra.op = c.op;
    // ~8 16-byte units per thread, at most one block per SM (UNMEASURED)
    ra.blocks = int(std::min<size_t>(rblocks, std::max<size_t>(1, m * c.e / (512 * 128))));
    ra.per_block = round_up((m + ra.blocks - 1) / ra.blocks, 16 / c.e);
    launch_ce_reduce(ra, c.B);
    return;
  }
  for (int r = 0; r < c.n; ++r) {
    if (r == c.me) continue;
    Piece rp = recv_piece(c.d, r);
    size_t lo = 0, m = sub_range(rp.count, k, c.C, 0, c.C, &lo);
    if (!m) continue;
    gpu::memcpy_async(c.out + (rp.dst_off + lo) * c.e, mine + c.st.layout().input(slot, r), m * c.e, c.B);
  }
}

}  // namespace

void ce_collective(CollState& st, const CollDesc& d, int dtype, int op, const void* src, void* dst, void* stream) {
  if (d.kind == kAllToAllV)  // its step count is agreed on the device
    throw InvalidArgument("collective copy-engine path: all_to_all_v has none");
  gpu::DeviceGuard dg(st.device());
  const Options& o = st.svc().options();
  const size_t e = d.elem, cap = st.layout().cap;
  const size_t want = o.coll_ce_chunk_bytes ? std::min(o.coll_ce_chunk_bytes, cap) : cap;
  const size_t C = chunk_elems(want, e);
  if (C == 0)
    throw InvalidArgument(
        common::format("collective copy-engine path: a chunk of {} bytes holds no 16-byte unit", want));
  const size_t steps = (local_max_piece(d) + C - 1) / C;  // the same on every rank for these kinds
  const CeCall c{st, d, dtype, op, e, C, st.rank(), st.world(), std::max(1, st.ce_lanes()),
                 static_cast<const char*>(src), static_cast<char*>(dst), stream, st.ce_stream(0)};
  const LaunchArgs a = step_args(st);

  gpu::event_record(c.ev(kCeFork), c.A);
  gpu::stream_wait_event(c.B, c.ev(kCeFork));
  const int rblocks = whole_gpu_blocks(st);
  if (!reducing(d.kind)) {  // own piece, never through the scratch (the reducing kinds read it in place)
    Piece sp = send_piece(d, c.me), rp = recv_piece(d, c.me);
    const char* from = c.src + sp.src_off * e;
    char* to = c.out + rp.dst_off * e;
    if (rp.count && from != to) gpu::memcpy_async(to, from, rp.count * e, c.B);
    gpu::event_record(c.ev(kCeDone), c.B);
  }
  launch_ce_step(a, true, c.A);
  for (size_t k = 0; k < steps; ++k) {
    push_step(c, k);
    if (k > 0) gpu::stream_wait_event(c.A, c.ev(kCeDone));  // our reads of slot (k-1)&1 are done
    launch_ce_step(a, false, c.A);
    gpu::event_record(c.ev(kCeReady), c.A);
    gpu::stream_wait_event(c.B, c.ev(kCeReady));
    receive_step(c, k, rblocks);
    gpu::event_record(c.ev(kCeDone), c.B);
  }
  gpu::stream_wait_event(c.A, c.ev(kCeDone));  // join: B's copies (own piece included) precede what follows
}

}  // namespace peerlink::coll
