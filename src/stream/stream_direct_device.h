// Device side of the NCCL form's zero-copy messages (pairs whose DevChannel::direct is set: kDirectLocal
// between two ranks of one process, kDirectIpc between processes; messages with is_direct(len)).
// Included only by stream_raw_device.h.
//
// Why: a staged message crosses NVLink into the receiver's staging slot, then the receiver copies
// it out, with a fence and a flag per 128 KB chunk. On 2x H200, two ranks as threads of one
// process, 128 MB sendrecv in a graph: staged 450 us; the same with the
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
// Chunk numbers: a zero-copy candidate keeps its raw_chunks(len) chunk numbers whichever way it
// goes, so both sides' block/chunk arithmetic never depends on a run-time decision. A zero-copy
// message's chunks are never staged; the receiver hands their slots back (raw_slot_consumed = g + 1,
// as if they had been copied out) so that later chunks get their credit; a slot only once the last
// chunk staged there before the message was handed back by whichever block owned it (else the
// sender could restage the slot while that block still reads it: recv_direct). The launch's late
// chunks are handed back by the next launch, as for staged chunks (stream_raw_device.h).
// Ring reuse: post d + kDirectRing is written only after message d completed on the receiver (a
// zero-copy one needs every sender block's arrival; a staged one needs its chunks, so every sender
// block with a chunk of it has read the post), and a launch holds fewer messages than the ring
// (kMaxLaunchOps < kDirectRing). A sender block with no chunk of a staged message may find its post
// already replaced by a later one (tag ahead of d): that means "staged", and it has nothing to do.
//
// Between processes (kDirectIpc; host side and why: stream_zc.h) the receiver's host cannot hand
// the sender an address: it exports the receive allocation under a zero-copy slot, the sender's
// host maps it and a sender launch enters it in the sender's private table, then acknowledges the
// slot in the receiver's area (write_zc_binds). The receiver's block 0 decides per message at run
// time (zero-copy once the slot is acknowledged: choose_ipc), posts ipc_post(slot, offset), and
// records its choice for the channel's other blocks (direct_choice), which stage or skip by it. The
// sender resolves the post against its own table and refuses any post that does not fall inside
// the allocation bound under that slot, or a plain address from another process (post_target).
#pragma once
#include "stream/stream_device.h"

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

// Sender, every block, after its share of message d was stored into the receiver's buffer
// (part_copy over the channel's blocks, or swap_copy): the last block to finish publishes
// direct_done = d and returns true (thread 0).
__device__ bool publish_direct(const Ctx& x, uint64_t d) {
  __syncthreads();
  if (threadIdx.x != 0) return false;
  // Message d + kDirectRing is posted only after the receiver saw direct_done = d.
  if (!last_to_arrive(x, &x.c->mine->direct_arrive[d % kDirectRing])) return false;
  store_release_system(&x.c->remote->direct_done.v, d);
  return true;
}

// Block 0, thread 0 of a launch that carries binds (before anything else): enters them in this rank's
// table, then (after a system fence, so a sender block that sees a post naming the slot finds the
// entry) acknowledges each slot in the peer's area.
__device__ void write_zc_binds(const StreamLaunchHeader& L) {
  for (int i = 0; i < L.nbinds; ++i) {
    volatile ZcEntry* e = &L.zc_table[uint64_t(L.binds[i].peer) * kZcSlots + uint64_t(L.binds[i].slot)];
    e->base = L.binds[i].base;
    e->size = L.binds[i].size;
  }
  fence_system();
  for (int i = 0; i < L.nbinds; ++i) store_release_system(&L.binds[i].remote->zc_ack[L.binds[i].slot], 1);
}

// Thread 0 of a sender block: the destination that post `a` (non-zero) names, or nullptr after
// recording a protocol error (the pair stops). In-process posts are addresses in this process;
// posts between processes are ipc_post(slot, offset), checked against this rank's own table so that
// the message lies inside the allocation the peer exported under that slot.
__device__ char* post_target(const Ctx& x, uint64_t a, uint64_t len) {
  if (x.c->direct == kDirectLocal && !(a & kPostIpc)) return reinterpret_cast<char*>(a);
  if (x.c->direct == kDirectIpc && (a & kPostIpc)) {
    const uint64_t slot = (a & ~kPostIpc) >> 48, off = a & kPostOffsetMask;
    if (slot < uint64_t(kZcSlots)) {
      const volatile ZcEntry* e = &x.L->zc_table[uint64_t(x.c->peer) * kZcSlots + slot];
      uint64_t base = e->base, size = e->size;
      if (size == 0) {  // entered by block 0 of this very launch: order our reads after its fence
        fence_acq_rel_system();
        base = e->base;
        size = e->size;
      }
      if (size != 0 && off <= size && len <= size - off) return reinterpret_cast<char*>(base + off);
    }
  }
  record_error(x, kErrProtocol);
  abort_pair(x);
  return nullptr;
}

// Receiver, block 0: where message d goes (0: staged).
__device__ __forceinline__ void post_direct(const Ctx& x, uint64_t d, uint64_t a) {
  store_volatile_16(&x.c->remote->direct_post[d % kDirectRing], uint32_t(a), direct_tag(d), uint32_t(a >> 32),
                    direct_tag(d));
}

// Receiver, between processes, all threads of a block: zero-copy candidate d into an exported
// allocation (kOpDirectIpc). Block 0 decides (zero-copy once the sender acknowledged the slot), tells
// the host (zc_seen), records the choice for the channel's other blocks and posts; a block with
// chunks of the message waits for that choice (block 0 makes it before it waits for anything of
// message d, so this wait never closes a cycle). Returns 1 zero-copy, 0 staged, -1 failed
// (recorded). A block without chunks of the message gets 1: it has nothing to do either way.
__device__ int choose_ipc(const Ctx& x, const DevOp& op, uint64_t d, bool has_chunks) {
  __shared__ int s_choice;
  if (x.blk != 0 && !has_chunks) return 1;
  if (threadIdx.x == 0) {
    volatile uint64_t* choice = &x.c->mine->direct_choice[d % kDirectRing];
    if (x.blk == 0) {
      const uint64_t slot = op.buf_id;  // < kZcSlots: this rank's host set it
      const int zc = load_volatile(&x.c->mine->zc_ack[slot]) != 0 ? 1 : 0;
      if (zc) reinterpret_cast<volatile uint8_t*>(x.L->zc_seen)[uint64_t(x.c->peer) * kZcSlots + slot] = 1;
      *choice = 2 * d + uint64_t(zc);
      post_direct(x, d, zc ? ipc_post(slot, op.offset) : 0);
      s_choice = zc;
    } else {
      s_choice = -1;
      uint64_t t0 = 0;
      for (uint32_t n = 0;; ++n) {
        const uint64_t v = *choice;
        if (v >> 1 == d) {
          s_choice = int(v & 1);
          break;
        }
        if (n == 0) t0 = now_ns();
        if ((n & 127) == 127 && wait_failed(x, t0)) break;
      }
    }
  }
  __syncthreads();
  const int r = s_choice;
  __syncthreads();  // read by all before thread 0 rewrites it for the next message
  return r;
}

// Receiver, block 0 (all threads): zero-copy message d whose chunks are [gs, gs + n) of the pair and
// chunks from `defer` on handed back by the next launch (late_from, stream_raw_device.h). Waits for
// the bytes (direct_done >= d, acquired: this stream's next kernels see them), then hands the
// message's other chunk numbers back: per slot only its latest chunk of the message, one thread per
// slot, each once the slot's last occupant before the message was handed back by whichever block
// owned it (acquired, so that block's reads of the slot happen before the sender's next writes into
// it). False on failure.
__device__ bool recv_direct(const Ctx& x, uint64_t d, uint64_t gs, uint64_t n, uint64_t defer, uint64_t slots) {
  __shared__ int s_ok;
  if (threadIdx.x == 0) s_ok = wait_ge_acquire(x, &x.c->mine->direct_done.v, d);
  __syncthreads();
  if (!s_ok) return false;
  bool ok = true;
  const uint64_t span = n < slots ? n : slots;  // the last `span` chunks sit in distinct slots
  for (uint64_t j = threadIdx.x; j < span && ok; j += blockDim.x) {
    const uint64_t g = gs + n - 1 - j;
    if (g >= defer) continue;  // the next launch hands it back
    uint64_t* f = &x.c->remote->raw_slot_consumed[mod_pow2(g, slots)].v;
    const uint64_t back = ((g - gs) / slots + 1) * slots;  // to the slot's last chunk before gs
    if (g >= back) ok = wait_ge_acquire(x, f, g - back + 1);
    if (ok) store_release_system(f, g + 1);
  }
  return __syncthreads_and(ok) != 0;  // also: s_ok is read by all before the next message rewrites it
}

}  // namespace
}  // namespace peerlink::stream
