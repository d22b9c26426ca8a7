// Device side of the published-form send and recv (protocol: stream_layout.h; memory ordering:
// stream_kernels.cu). Included only by stream_kernels.cu.
#pragma once
#include "stream/stream_ll_device.h"

namespace peerlink::stream {
namespace {  // one translation unit includes this

// What a published send loaded before its first message: the thread's first data word and (thread 0)
// the credit word (a relaxed load: wait_credit says why).
struct SendStart {
  FirstWord first;
  bool have_credit = false;
  uint64_t credit = 0;
};

// Published form, LL (len <= ll_max, stream_layout.h): every block of the channel writes its range of
// the message's lines (block 0 the header too) into the receiver's ring slot; no fence, no flag, no
// wait for the posted recv except the ring credit (almost always there already). False when the
// credit wait failed.
__device__ bool send_pub_ll(const Ctx& x, const DevOp& op, uint64_t k, const SendStart& st) {
  const DevChannel& c = *x.c;
  __shared__ int s_go;
  if (threadIdx.x == 0) {
    // The receiver emptied the slot (zeroed its lines) before it posted k + 1 - kLLSlots (wait_credit).
    const uint64_t need = k + 1 <= kLLSlots ? 0 : k + 1 - kLLSlots;
    s_go = st.have_credit && st.credit >= need ? 1 : wait_credit(x, &c.mine->pub_posted.v, need);
  }
  __syncthreads();
  if (!s_go) return false;
  const uint32_t h[4] = {op.buf_id, uint32_t(op.len), uint32_t(op.offset), uint32_t(op.offset >> 32)};
  uint64_t l0, l1;
  ll_range(op.len, x.blk, x.nb, l0, l1);
  ll_write(ll_slot(x, c.remote, k), op.src, op.len, ll_flag(k), h, x.blk == 0, l0, l1, st.first);
  __syncthreads();  // s_go is read by every thread before thread 0 rewrites it for the next message
  return true;
}

// Published form: every block of the channel waits for the posted recv (a local spin), checks the
// descriptor, copies its share straight into the receiver's buffer; the last block to finish
// message k (pub_arrive) writes the ReadyDesc and release-stores pub_ready = k.
// `aborted` (the pair's abort word, loaded by the kernel) is tested only once an LL first
// message's first loads are in flight with it and the counter: the thread's first data word and
// the credit, instead of one after the other. One-GPU stand-in, graph, 8 B-4 KB:
// -0.15 us in a sendrecv group, -0.05 ping-pong one-way; the same for the NCCL form's sender was
// +0.08 us ping-pong, so send_raw keeps its order. One-block channels only (messages up to 8 KB):
// with it, 32 KB (four blocks) measured +0.15 us ping-pong.
__device__ void send_pub(const Ctx& x, uint64_t aborted) {
  const DevChannel& c = *x.c;
  __shared__ int s_go, s_ok;
  const uint64_t base = load_volatile(&c.mine->pub_sent.v);
  SendStart st;
  const DevOp& op0 = x.ops[c.first_op];
  if (c.nops > 0 && x.nb == 1 && is_ll(op0.len, x.L->ll_max)) {
    uint64_t l0, l1;
    ll_range(op0.len, x.blk, x.nb, l0, l1);
    st.first = ll_first_word(op0.src, op0.len, l0, l1);
    if (threadIdx.x == 0) {
      st.credit = load_volatile(&c.mine->pub_posted.v);  // a credit, see wait_credit
      st.have_credit = true;
    }
  }
  if (stop_if_aborted(x, aborted)) return;
  for (int i = 0; i < c.nops; ++i) {
    const DevOp& op = x.ops[c.first_op + i];
    const uint64_t k = base + i + 1;
    if (is_ll(op.len, x.L->ll_max)) {
      if (!send_pub_ll(x, op, k, i == 0 ? st : SendStart{})) break;
      continue;
    }
    if (threadIdx.x == 0) {
      s_go = wait_ge_acquire(x, &c.mine->pub_posted.v, k);
      s_ok = 0;
      if (s_go) {
        const volatile PostDesc& p = c.mine->post[k % kDescRing];
        if (p.seq != k) {
          record_error(x, kErrProtocol);
          abort_pair(x);
          s_go = 0;
        } else {
          s_ok = p.buf_id == op.buf_id && p.offset == op.offset && p.len == op.len;
        }
      }
    }
    __syncthreads();
    if (!s_go) break;
    if (s_ok) part_copy(op.dst, op.src, op.len, false, x.blk, x.nb);  // mismatch: nothing written
    __syncthreads();
    if (threadIdx.x == 0) {
      // Message k + kDescRing is posted only after the receiver saw pub_ready = k (below): no block
      // can count for it before the last one's reset.
      if (last_to_arrive(x, &c.mine->pub_arrive[k % kDescRing])) {
        volatile ReadyDesc& d = c.remote->ready[k % kDescRing];
        d.seq = k;
        d.offset = op.offset;
        d.len = op.len;
        d.buf_id = op.buf_id;
        d.status = s_ok ? kStatusOk : kStatusMismatch;
        store_release_system(&c.remote->pub_ready.v, k);
      }
    }
  }
  // Advances by every op of the launch even after a failure (the pair is aborted then anyway), so
  // the counters of a healthy pair are always base + nops.
  channel_exit(x, [&] { c.mine->pub_sent.v = base + c.nops; });
}

// Published form, receiver. Block 0 posts recv k; every block waits for the message (direct: block
// 0 checks the ReadyDesc; LL: each block reads and zeroes its range of the sender's lines, all of
// them computed from the header's length, so a mismatch drains every line). Several blocks only for
// a launch with one recv on the channel (the host sees to it): the header of slot k is zeroed by
// block 0 just before it posts k + 1, when no block can still be reading it (stream_layout.h).
__device__ void recv_pub(const Ctx& x) {
  const DevChannel& c = *x.c;
  __shared__ int s_path;
  __shared__ uint32_t s_hdr[4];
  const uint64_t base = load_volatile(&c.mine->pub_recvd.v);
  const uint64_t ll_max = x.L->ll_max;
  for (int i = 0; i < c.nops && (x.blk == 0 || c.nops == 1); ++i) {
    const DevOp& op = x.ops[c.first_op + i];
    const uint64_t k = base + i + 1;
    char* slot = ll_max ? ll_slot(x, c.mine, k) : nullptr;
    // Block 0 posts recv k from a thread of another warp than thread 0's (when the block has one),
    // so that thread 0 spins at once: the post's system-scope release stalls only its own warp
    // (stand-in: -0.13 us in a sendrecv group at 8 B-4 KB, ping-pong unchanged).
    const unsigned poster = blockDim.x > unsigned(warpSize) ? blockDim.x - 1 : 0;
    if (x.blk == 0 && threadIdx.x == poster) {
      if (ll_max && k > 1) {  // the previous message's header (read by all its blocks, in an earlier launch or above)
        char* prev = ll_slot(x, c.mine, k - 1);
        store_volatile_16(prev, 0, 0, 0, 0);
        store_volatile_16(prev + 16, 0, 0, 0, 0);
      }
      volatile PostDesc& p = c.remote->post[k % kDescRing];
      p.seq = k;
      p.offset = op.offset;
      p.len = op.len;
      p.buf_id = op.buf_id;
      store_release_system(&c.remote->pub_posted.v, k);  // after the zeroing (release) and the descriptor
    }
    if (threadIdx.x == 0) {
      s_path = wait_ready_or_ll(x, &c.mine->pub_ready.v, k, slot, s_hdr);
      if (s_path == 1 && x.blk == 0) {
        acquire(x, &c.mine->pub_ready.v);  // the sender's bytes in our buffer are visible to this stream's next kernels
        const volatile ReadyDesc& d = c.mine->ready[k % kDescRing];
        if (d.seq != k) {
          record_error(x, kErrProtocol);
          abort_pair(x);
          s_path = 0;
        } else if (d.status != kStatusOk) {
          record_error(x, kErrMismatch);
        }
      }
    }
    __syncthreads();
    const int path = s_path;
    if (path == 0) break;
    if (path == 2) {
      const uint64_t hoff = (uint64_t(s_hdr[3]) << 32) | s_hdr[2];
      const uint64_t hlen = s_hdr[1];
      if (!is_ll(hlen, ll_max)) {  // a header no sender of this layout writes
        if (threadIdx.x == 0) {
          record_error(x, kErrProtocol);
          abort_pair(x);
        }
        break;
      }
      const bool ok = s_hdr[0] == op.buf_id && hlen == op.len && hoff == op.offset;
      if (!ok && threadIdx.x == 0 && x.blk == 0) record_error(x, kErrMismatch);  // drained below, nothing written
      uint64_t l0, l1;
      ll_range(hlen, x.blk, x.nb, l0, l1);
      if (!ll_read(x, k, slot, hlen, ok ? op.dst : nullptr, l0, l1, false)) break;
    }
    __syncthreads();  // s_path / s_hdr are rewritten for the next message
  }
  channel_exit(x, [&] { c.mine->pub_recvd.v = base + c.nops; });
}

}  // namespace
}  // namespace peerlink::stream
