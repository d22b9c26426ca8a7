// Host side of in-place NCCL-form pairs (stream_gate.h).
#include "transport/stream_gate.h"

#include "common/log.h"
#include "peerlink/errors.h"
#include "transport/stream_p2p.h"

namespace peerlink::stream {

using detail::StreamOpKind;

int gate_in_place(StreamLaunch& L, uint64_t chunk, uint64_t ll_max) {
  int pairs = 0;
  for (int cr = 0; cr < L.nch; ++cr) {
    DevChannel& rc = L.ch[cr];
    if (rc.kind != int16_t(StreamOpKind::RecvRaw) || !rc.mine) continue;
    uint64_t next = 0;
    for (int i = 0; i < rc.nops; ++i) {
      DevOp& r = L.ops[rc.first_op + i];
      if (!r.len) continue;
      DevOp* s = nullptr;
      for (int cs = 0; cs < L.nch && !s; ++cs) {
        const DevChannel& sc = L.ch[cs];
        if (sc.kind != int16_t(StreamOpKind::SendRaw)) continue;
        for (int k = 0; k < sc.nops && !s; ++k) {
          DevOp& o = L.ops[sc.first_op + k];
          if (o.src == r.dst && o.len == r.len && !(o.flags & kOpGated)) s = &o;
        }
      }
      if (!s) continue;
      const uint64_t n = raw_chunks(r.len, chunk, ll_max);
      if (next + n > kGateCap)
        throw UnsupportedError(common::cat("in-place send/recv from rank ", rc.peer, " in one group: ", next + n,
                                           " chunks to order, at most ", kGateCap,
                                           "; receive into another buffer or split the group"));
      r.flags = kOpGated;  // staged: the kernel posts no address for it
      r.buf_id = uint32_t(next);
      s->flags = kOpGated;
      s->dst = reinterpret_cast<char*>(&rc.mine->gate[next]);
      next += n;
      ++pairs;
    }
  }
  return pairs;
}

}  // namespace peerlink::stream
