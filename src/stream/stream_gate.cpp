// Host side of in-place NCCL-form pairs (stream_gate.h).
#include "stream/stream_gate.h"

#include <cstdint>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "stream/stream_runner.h"  // StreamOpKind

namespace peerlink::stream {

using detail::StreamOpKind;

namespace {

// The unused send of L that reads exactly r's bytes, or nullptr.
DevOp* paired_send(StreamLaunch& L, const DevOp& r) {
  for (int cs = 0; cs < L.nch; ++cs) {
    const DevChannel& sc = L.ch[cs];
    if (sc.kind != int16_t(StreamOpKind::SendRaw)) continue;
    for (int k = 0; k < sc.nops; ++k) {
      DevOp& o = L.ops[sc.first_op + k];
      if (o.src == r.dst && o.len == r.len && !(o.flags & (kOpGated | kOpGateZc))) return &o;
    }
  }
  return nullptr;
}

// The zero-copy exchange needs a recv the peer writes directly (in this process: kOpDirectOk),
// 16-byte vectors (the send holds units in uint4 registers), and staged pieces that are whole units
// (a staged send opens the units of each chunk it read).
bool swap_fits(const DevOp& r, uint64_t chunk) {
  return (r.flags & kOpDirectOk) && ((reinterpret_cast<uintptr_t>(r.dst) | r.len) & 15) == 0 &&
         chunk >= 2 * kSwapUnit;
}

}  // namespace

int gate_in_place(StreamLaunch& L, uint64_t chunk, uint64_t ll_max) {
  int pairs = 0;
  for (int cr = 0; cr < L.nch; ++cr) {
    DevChannel& rc = L.ch[cr];
    if (rc.kind != int16_t(StreamOpKind::RecvRaw) || !rc.mine) continue;
    uint64_t next = 0, next_unit = 0;
    uint64_t nd = 0;  // zero-copy candidates of the channel so far (the recv kernel counts the same)
    const uint64_t dmin = direct_min_of(rc.direct, L.direct_min, L.direct_ipc_min);
    for (int i = 0; i < rc.nops; ++i) {
      DevOp& r = L.ops[rc.first_op + i];
      const bool candidate = rc.direct && is_direct(r.len, dmin, ll_max);
      if (candidate) ++nd;
      if (!r.len) continue;
      DevOp* s = paired_send(L, r);
      if (!s) continue;
      ++pairs;
      // Zero-copy while the channel's unit gates last (512 MB per launch), staged beyond.
      if (candidate && rc.remote && swap_fits(r, chunk) && next_unit + swap_units(r.len) <= kSwapGateCap) {
        const uint64_t n = swap_units(r.len);
        r.flags = kOpDirectOk | kOpGateZc;
        r.buf_id = uint32_t(next_unit);
        s->flags = kOpGateZc;
        s->dst = reinterpret_cast<char*>(&rc.remote->swap_gate[next_unit]);
        s->buf_id = uint32_t(cr);
        s->offset = nd;
        next_unit += n;
        continue;
      }
      const uint64_t n = raw_chunks(r.len, chunk, ll_max);
      if (next + n > kGateCap)
        throw UnsupportedError(
            common::format("in-place send/recv from rank {} in one group: {} chunks to order, at most {}; receive into "
                           "another buffer or split the group",
                           rc.peer, next + n, kGateCap));
      r.flags = kOpGated;  // staged: the kernel posts no address for it
      r.buf_id = uint32_t(next);
      s->flags = kOpGated;
      s->dst = reinterpret_cast<char*>(&rc.mine->gate[next]);
      next += n;
    }
  }
  return pairs;
}

}  // namespace peerlink::stream
