// Device side of the copy-engine published-form send (stream_ce.cpp): the bodies of the two
// one-block kernels around the copy. Included only by stream_kernels.cu.
#pragma once
#include "stream/stream_device.h"

namespace peerlink::stream {
namespace {  // one translation unit includes this

// Copy-engine published-form send (Options::stream_ce_min; one op, one block each): the first
// kernel waits for the posted recv k and records whether it matches (ce_status); the host then
// enqueues the copy; the second kernel publishes ReadyDesc k and pub_ready = k and advances
// pub_sent. k comes from the device-resident pub_sent both times (nothing baked into a graph).
__device__ void ce_wait(const Ctx& x) {
  const DevChannel& c = *x.c;
  const DevOp& op = x.ops[c.first_op];
  if (threadIdx.x != 0) return;
  const uint64_t k = load_volatile(&c.mine->pub_sent.v) + 1;
  if (!wait_ge_acquire(x, &c.mine->pub_posted.v, k)) return;
  const volatile PostDesc& p = c.mine->post[k % kDescRing];
  if (p.seq != k) {
    record_error(x, kErrProtocol);
    abort_pair(x);
    return;
  }
  const bool ok = p.buf_id == op.buf_id && p.offset == op.offset && p.len == op.len;
  c.mine->ce_status[k % kDescRing] = ok ? kStatusOk : kStatusMismatch;
}

__device__ void ce_done(const Ctx& x) {
  const DevChannel& c = *x.c;
  const DevOp& op = x.ops[c.first_op];
  if (threadIdx.x != 0) return;
  const uint64_t k = load_volatile(&c.mine->pub_sent.v) + 1;
  const uint64_t st = load_volatile(&c.mine->ce_status[k % kDescRing]);
  if (st != kStatusOk && st != kStatusMismatch) {  // the waiting kernel failed: the pair is aborted
    record_error(x, kErrAborted);
    return;
  }
  fence_system();  // the copy engine's stores (complete before this kernel started) before pub_ready
  volatile ReadyDesc& d = c.remote->ready[k % kDescRing];
  d.seq = k;
  d.offset = op.offset;
  d.len = op.len;
  d.buf_id = op.buf_id;
  d.status = uint32_t(st);
  store_release_system(&c.remote->pub_ready.v, k);
  c.mine->ce_status[k % kDescRing] = 0;
  c.mine->pub_sent.v = k;
}

}  // namespace
}  // namespace peerlink::stream
