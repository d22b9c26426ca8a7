// Device side of the NCCL form's zero-copy messages between two ranks of one process (pairs whose
// DevChannel::direct is set; messages with is_direct(len)). Included only by stream_raw_device.h.
//
// Why: a staged message crosses NVLink into the receiver's staging slot, then the receiver copies
// it out, with a fence and a flag per 128 KB chunk. On 2x H200, two ranks as threads of one
// process, 128 MB sendrecv in a graph (session 12 call 1): staged 450 us; the same with the
// receiver's copy-out skipped (bytes wrong, for timing only) 409 us; the published form, one copy
// and one flag per message, 380 us. NCCL run by nccl-tests -g 2 in one process writes into the
// receiver's buffer directly and takes 386 us. So a message of one process pair is moved like a
// published-form message: one copy straight into the receiver's buffer, one flag.
//
// Protocol, zero-copy message d of the ordered pair (both sides count them: direct_sent/_recvd):
//   receiver  block 0 writes DirectPost d {address or 0, tag d} into the sender's area (one 16-byte
//             line, no fence: the sender reads both tags). Address 0 when the host found the buffer
//             out of the sender GPU's reach (VMM, memory pool): the message is then staged as any
//             other. With an address: block 0 waits direct_done >= d, hands the message's chunk
//             numbers back (below) and leaves; the other blocks skip the message.
//   sender    every block waits for post d: address -> copies its share (part_copy over all the
//             channel's blocks), the last block to finish (direct_arrive) release-stores
//             direct_done = d in the receiver's area; 0 -> stages its chunks as usual.
// Chunk numbers: a zero-copy candidate keeps its chunks_of(len) chunk numbers whichever way it
// goes, so both sides' block/chunk arithmetic never depends on a run-time decision. A zero-copy
// message's chunks are never staged; the receiver hands their slots back (raw_slot_consumed = g + 1,
// as if they had been copied out) so that later chunks get their credit; a slot only once the last
// chunk staged there before the message was handed back by whichever block owned it (else the
// sender could restage the slot while that block still reads it: recv_direct). The launch's last
// chunk is handed back by the next launch, as for staged chunks (stream_raw_device.h).
// Ring reuse: post d + kDirectRing is written only after message d completed on the receiver (a
// zero-copy one needs every sender block's arrival; a staged one needs its chunks, so every sender
// block with a chunk of it has read the post), and a launch holds fewer messages than the ring
// (kMaxLaunchOps < kDirectRing). A sender block with no chunk of a staged message may find its post
// already replaced by a later one (tag ahead of d): that means "staged", and it has nothing to do.
#pragma once
#include "transport/stream_device.h"

namespace peerlink::stream {
namespace {  // one translation unit includes this

__device__ __forceinline__ uint32_t direct_tag(uint64_t d) { return uint32_t(d); }

// Thread 0 of a sender block: waits for post d. Returns 1 with *addr (0 = stage it), 0 on timeout
// or abort (recorded).
__device__ int wait_direct_post(const Ctx& x, uint64_t d, uint64_t* addr) {
  const DirectPost* p = &x.c->mine->direct_post[d % kDirectRing];
  const uint32_t want = direct_tag(d);
  uint64_t t0 = 0;
  for (uint32_t n = 0;; ++n) {
    uint32_t lo, f0, hi, f1;
    load_volatile_16(p, lo, f0, hi, f1);
    if (f0 == f1) {
      const int32_t ahead = int32_t(f0 - want);
      if (ahead == 0) {
        *addr = (uint64_t(hi) << 32) | lo;
        return 1;
      }
      if (ahead > 0) {  // replaced by a later post: this one was staged (see above)
        *addr = 0;
        return 1;
      }
    }
    if (n == 0) t0 = now_ns();
    if ((n & 127) == 127 && wait_failed(x, t0)) return 0;
  }
}

// Sender, every block: share blk of message op into the receiver's buffer at `dst`; the last block
// to finish publishes direct_done = d.
__device__ void send_direct(const Ctx& x, const DevOp& op, char* dst, uint64_t d) {
  part_copy(dst, op.src, op.len, false, x.blk, x.nb);
  __syncthreads();
  if (threadIdx.x != 0) return;
  // Message d + kDirectRing is posted only after the receiver saw direct_done = d.
  if (last_to_arrive(x, &x.c->mine->direct_arrive[d % kDirectRing]))
    store_release_system(&x.c->remote->direct_done.v, d);
}

// Receiver, thread `poster` of block 0: where message d goes (0: staged).
__device__ __forceinline__ void post_direct(const Ctx& x, uint64_t d, const char* dst) {
  const uint64_t a = reinterpret_cast<uint64_t>(dst);
  store_volatile_16(&x.c->remote->direct_post[d % kDirectRing], uint32_t(a), direct_tag(d), uint32_t(a >> 32),
                    direct_tag(d));
}

// Receiver, block 0 (all threads): zero-copy message d whose chunks are [gs, gs + n) of the pair and
// g_last the launch's last chunk. Waits for the bytes (direct_done >= d, acquired: this stream's
// next kernels see them), then hands the message's chunk numbers back but g_last (the next launch
// does): per slot only its latest chunk of the message, one thread per slot, each once the slot's
// last occupant before the message was handed back by whichever block owned it (acquired, so that
// block's reads of the slot happen before the sender's next writes into it). False on failure.
__device__ bool recv_direct(const Ctx& x, uint64_t d, uint64_t gs, uint64_t n, uint64_t g_last, uint64_t slots) {
  __shared__ int s_ok;
  if (threadIdx.x == 0) s_ok = wait_ge_acquire(x, &x.c->mine->direct_done.v, d);
  __syncthreads();
  if (!s_ok) return false;
  bool ok = true;
  const uint64_t span = n < slots ? n : slots;  // the last `span` chunks sit in distinct slots
  for (uint64_t j = threadIdx.x; j < span && ok; j += blockDim.x) {
    const uint64_t g = gs + n - 1 - j;
    if (g == g_last) continue;
    uint64_t* f = &x.c->remote->raw_slot_consumed[mod_pow2(g, slots)].v;
    const uint64_t back = ((g - gs) / slots + 1) * slots;  // to the slot's last chunk before gs
    if (g >= back) ok = wait_ge_acquire(x, f, g - back + 1);
    if (ok) store_release_system(f, g + 1);
  }
  return __syncthreads_and(ok) != 0;  // also: s_ok is read by all before the next message rewrites it
}

}  // namespace
}  // namespace peerlink::stream
