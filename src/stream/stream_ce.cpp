// Copy-engine path of the GPU published-form send (Options::stream_ce_min, off when 0). For each
// send of a batch (on one stream) made only of published-form sends of at least ce_min bytes:
//   1. a one-block kernel (kChCeWait) waits, bounded, for the posted recv k (k = the device-resident
//      pub_sent + 1) and records in ce_status[k] whether it matches the send;
//   2. cudaMemcpyAsync from src into the mapped destination, split over stream_ce_lanes lanes: lane 0
//      on the caller's stream, the others on the engine's side streams, forked from and joined back
//      into the caller's stream with events (the pattern stream capture turns into graph edges);
//   3. a one-block kernel (kChCeDone) writes ReadyDesc k and pub_ready = k and advances pub_sent.
// Nothing of k is baked into the launches: a replayed graph continues from the counters. The copy is
// not conditional, so unlike the kernel path a (buffer, offset, len) mismatch still writes the
// sender's range of the published buffer (inside it: both ranges were checked against the
// publication when the calls were made); the receiver gets the mismatch error as usual. After a
// failed wait (timeout, dead peer) the copy also runs, into the same checked range, and the
// publishing kernel reports the aborted pair instead of publishing.
// Batches that mix in anything else (a recv of a ping-pong group, NCCL-form ops) keep the kernel path:
// a recv enqueued behind the copy could wait for a peer whose own copy waits for this rank's post.
#include <algorithm>

#include "gpu/runtime.h"
#include "stream/stream_gpu_runner.h"
#include "stream/stream_launch.h"

namespace peerlink::detail {

using namespace peerlink::stream;

bool GpuStreamRunner::ce_eligible(const std::vector<const StreamOp*>& ops) const {
  if (ce_min_ == 0 || ops.empty()) return false;
  for (const StreamOp* op : ops)
    if (op->kind != StreamOpKind::SendPub || op->len < ce_min_) return false;
  return true;
}

void GpuStreamRunner::launch_ce(const StreamLaunch& L, void* stream) {
  // Lanes below 1 MB each would cost more in launches than they gain in parallel copies.
  constexpr size_t kMinLaneBytes = size_t(1) << 20;
  for (int c = 0; c < L.nch; ++c) {
    const DevChannel& ch = L.ch[c];
    for (int i = 0; i < ch.nops; ++i) {
      const DevOp& op = L.ops[ch.first_op + i];
      StreamLaunch K = L;  // geometry, timeout, error word; one channel of one op, one block
      K.nch = 1;
      K.nblocks = 1;
      K.ops[0] = op;
      K.ch[0] = ch;
      K.ch[0].first_op = 0;
      K.ch[0].nops = 1;
      K.ch[0].first_block = 0;
      K.ch[0].nblocks = 1;
      K.ch[0].kind = int16_t(kChCeWait);
      launch_stream_batch(K, stream);

      size_t lanes = 1 + ce_lanes_.size();
      while (lanes > 1 && op.len / lanes < kMinLaneBytes) --lanes;
      const size_t part = stream::round_up((op.len + lanes - 1) / lanes, 4096);
      if (lanes > 1) gpu::event_record(ce_events_[0].get(), stream);
      size_t off = part;
      for (size_t l = 1; l < lanes && off < op.len; ++l, off += part) {
        void* side = ce_lanes_[l - 1].get();
        gpu::stream_wait_event(side, ce_events_[0].get());
        gpu::memcpy_async(op.dst + off, op.src + off, std::min<size_t>(part, op.len - off), side);
        gpu::event_record(ce_events_[l].get(), side);
      }
      if (op.len) gpu::memcpy_async(op.dst, op.src, std::min<size_t>(part, op.len), stream);
      off = part;
      for (size_t l = 1; l < lanes && off < op.len; ++l, off += part) gpu::stream_wait_event(stream, ce_events_[l].get());

      K.ch[0].kind = int16_t(kChCeDone);
      K.pdl = 0;  // behind a copy: nothing to overlap with
      launch_stream_batch(K, stream);
    }
  }
}

}  // namespace peerlink::detail
