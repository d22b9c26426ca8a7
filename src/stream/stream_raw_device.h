// Device side of the NCCL-form send and recv: runs of chunks through staging slots or LL pieces
// (protocol: stream_layout.h; memory ordering: stream_kernels.cu). Included only by stream_kernels.cu.
#pragma once
#include "stream/stream_swap_device.h"

namespace peerlink::stream {
namespace {  // one translation unit includes this

// The first chunk of a message that block x.blk takes, when the message's chunks start at t0 of the
// channel's run (blocks take t = blk, blk + nb, ...).
__device__ __forceinline__ uint64_t first_piece(const Ctx& x, uint64_t t0) {
  if (x.nb == 1) return 0;  // the common case, without the divisions
  return (uint64_t(x.blk) + uint64_t(x.nb) - t0 % uint64_t(x.nb)) % uint64_t(x.nb);
}

// In place (kOpGated, stream_gate.h). The sender opens chunk j's gate after its block read the
// chunk (thread 0, after the __syncthreads that follows the copy: every load of the block returned).
// Relaxed on both sides, as a credit is (wait_credit): the hazard is the recv's stores against loads
// that already returned, and the recv stores only after its load saw the gate.
__device__ __forceinline__ void open_gate(const DevOp& op, uint64_t j) {
  reinterpret_cast<volatile uint32_t*>(op.dst)[j] = 1;
}
// Thread 0 of a recv block: waits for chunk j's gate, then closes it for the next launch. False on
// timeout or abort (recorded).
__device__ bool pass_gate(const Ctx& x, const DevOp& op, uint64_t j) {
  volatile uint32_t* g = &x.c->mine->gate[op.buf_id + j];
  if (*g == 0) {
    const uint64_t t0 = now_ns();
    for (uint32_t n = 1; *g == 0; ++n)
      if ((n & 127) == 0 && wait_failed(x, t0)) return false;
  }
  *g = 0;
  return true;
}

// NCCL form, sender. The channel's messages are one run of chunks g0, g0 + 1, ... (a message of
// len bytes is raw_chunks(len) chunks; an empty one is one empty chunk); block b takes chunks
// t = b, b + nb, ... of the run. Chunk g goes through slot g % slots: wait until its previous
// occupant (g - slots) was consumed, copy, write the header, release-store raw_slot_ready = g + 1.
__device__ void send_raw(const Ctx& x) {
  const DevChannel& c = *x.c;
  const uint64_t chunk = x.L->chunk, slots = x.L->slots;
  __shared__ int s_go;
  __shared__ uint64_t s_direct;
  __shared__ SwapGates s_gates;
  const uint64_t msg0 = load_volatile(&c.mine->raw_sent_msgs.v);
  const uint64_t g0 = load_volatile(&c.mine->raw_sent_chunks.v);
  const uint64_t d0 = c.direct ? load_volatile(&c.mine->direct_sent.v) : 0;
  uint64_t t0 = 0;  // first chunk of op i within the run
  uint64_t nd = 0;  // zero-copy candidates so far
  bool failed = false;
  for (int i = 0; i < c.nops && !failed; ++i) {
    const DevOp& op = x.ops[c.first_op + i];
    const bool ll = is_ll(op.len, x.L->ll_max);
    const uint64_t n = raw_chunks(op.len, chunk, x.L->ll_max);
    SwapGates gates{};  // thread 0's: the gates this op opens in place (stream_swap_device.h)
    if (threadIdx.x == 0) our_gates(x, op, &gates);
    if (c.direct && is_direct(op.len, direct_min_of(c.direct, x.L->direct_min, x.L->direct_ipc_min), x.L->ll_max)) {
      const uint64_t d = d0 + ++nd;
      if (threadIdx.x == 0) {
        uint64_t a = 0;
        s_go = wait_direct_post(x, d, &a);
        if (s_go && (a & kPostGated)) {  // the receiver overwrites what its own send reads
          a &= ~kPostGated;
          gates.wait = receiver_gates(x, d, op.len);
          gates.wait_tag = swap_tag(d);
          if (!gates.wait) s_go = 0;
        }
        if (s_go && a) {
          a = reinterpret_cast<uint64_t>(post_target(x, a, op.len));
          if (!a) s_go = 0;
        }
        s_direct = a;
        s_gates = gates;
      }
      __syncthreads();
      const int go = s_go;
      char* const dst = reinterpret_cast<char*>(s_direct);
      const SwapGates zg = s_gates;
      __syncthreads();  // read by all before thread 0 rewrites them (the staged loop reuses s_go)
      if (!go) {
        failed = true;
        break;
      }
      if (dst) {  // zero-copy: no slot, no chunk flag (stream_direct_device.h)
        if (zg.open || zg.wait) {
          if (!swap_copy(x, op, dst, zg)) {
            failed = true;
            break;
          }
        } else {
          part_copy(dst, op.src, op.len, false, x.blk, x.nb);
        }
        if (publish_direct(x, d) && (op.flags & kOpGated))
          for (uint64_t j = 0; j < n; ++j) open_gate(op, j);  // the last block: every byte was read
        t0 += n;
        continue;
      }
    }
    uint64_t j = first_piece(x, t0);
    for (; j < n; j += uint64_t(x.nb)) {
      const uint64_t g = g0 + t0 + j;
      const uint64_t slot = mod_pow2(g, slots);
      if (threadIdx.x == 0) {
        // Acquired: the receiver's reads of the slot happened before it released it.
        s_go = wait_ge_acquire(x, &c.mine->raw_slot_consumed[slot].v, g + 1 <= slots ? 0 : g + 1 - slots);
      }
      __syncthreads();
      if (!s_go) {
        failed = true;
        break;
      }
      if (ll) {
        // Piece j, as LL lines into the slot's LL area (stream_layout.h): no fence, no flag.
        const uint64_t lp = ll_piece(op.len), m = msg0 + i + 1, off = j * lp;
        const uint64_t plen = op.len - off < lp ? op.len - off : lp;
        const uint32_t h[4] = {uint32_t(m), uint32_t(op.len), uint32_t(m >> 32), uint32_t(j)};
        ll_write(raw_ll(c.remote, slot), op.src + off, plen, ll_flag(g + 1), h, true, 0, ll_lines(plen));
        __syncthreads();  // s_go is read by every thread before thread 0 rewrites it
        if (threadIdx.x == 0 && (op.flags & kOpGated)) open_gate(op, j);
        continue;
      }
      const uint64_t piece = raw_piece(op.len, chunk, x.L->ll_max), off = j * piece;
      const uint64_t len = op.len - off < piece ? op.len - off : piece;
      char* stage = reinterpret_cast<char*>(c.remote) + x.L->staging_off + slot * chunk;
      if (op.len) part_copy(stage, op.src + off, len, false, 0, 1);
      __syncthreads();
      if (threadIdx.x == 0) {
        volatile ChunkHdr& h = c.remote->hdr[slot];
        h.msg = msg0 + i + 1;
        h.msg_len = op.len;
        h.chunk_off = off;
        h.chunk_len = op.len ? len : 0;
        store_release_system(&c.remote->raw_slot_ready[slot].v, g + 1);
        if (op.flags & kOpGated) open_gate(op, j);
        if (gates.open) open_units(gates, off, len);  // in place, the recv zero-copy
      }
    }
    t0 += n;
  }
  const uint64_t total = t0;  // only meaningful when the loop ran to its end
  channel_exit(x, [&] {
    if (failed) return;  // the pair is aborted: the counters no longer matter
    c.mine->raw_sent_msgs.v = msg0 + c.nops;
    c.mine->raw_sent_chunks.v = g0 + total;
    if (c.direct) c.mine->direct_sent.v = d0 + nd;
  });
}

// NCCL form, receiver: the same run of chunks, computed from this side's lengths (a sender's
// different length is detected on the first header that shows it: kErrRawLength, the pair stops,
// as a mismatched ncclSend/ncclRecv is an error too). Block b takes chunks t = b, b + nb, ...: wait
// raw_slot_ready >= g + 1 (a local spin), check the header, copy out, release-store
// raw_slot_consumed = g + 1 in the sender's area.
__device__ void recv_raw(const Ctx& x) {
  const DevChannel& c = *x.c;
  const uint64_t chunk = x.L->chunk, slots = x.L->slots;
  __shared__ int s_go;  // 0 failed, 1 staged chunk, 2 LL lines
  __shared__ uint32_t s_hdr[4];
  const uint64_t msg0 = load_volatile(&c.mine->raw_recvd_msgs.v);
  const uint64_t g0 = load_volatile(&c.mine->raw_recvd_chunks.v);
  // Block 0's last threads load the late range's start beside g0 (issued before g0 is used), and
  // the warp hands chunk g0 - 1 and the others back in one branch. nccl-tests sendrecv_perf -g 2
  // -G 100, 2x H100, 4 KB LL pieces, loaded after g0 / beside g0 (one machine): 4 KB 4.79-4.83 /
  // 4.68-4.74 us, 16 KB 5.46-5.49 / 5.38-5.40. Beside g0 but j = 0 in a branch of its own (another
  // machine): 4 KB 4.55-4.63, but 16 KB 6.83-6.91, as if nothing were late: keep one branch.
  const uint64_t late_j = uint64_t(blockDim.x - 1 - threadIdx.x);
  const uint64_t from = x.blk == 0 && late_j >= 1 && late_j < slots ? load_volatile(&c.mine->raw_recvd_deferred.v) : 0;
  // Slots handed back late. A release store (a system-scope fence) made as a block's last act lies
  // on the path to the kernel's completion, and so to the next kernel of the stream; the sender
  // needs slot g back only for chunk g + slots. So a launch hands back at once only the chunks whose
  // slot the sender may need during it or its next launch of the same length (run); the others,
  // chunks [defer, g_last] (always g_last itself), are handed back here, at the start of the
  // channel's next launch, by block 0's last threads (no stores of their own to wait for; thread 0
  // polls). 2x H100, nccl-tests sendrecv_perf -g 2 -G 100 (only g_last late /
  // every chunk whose slot is not reused in the launch late): 16 KB 6.95 / 5.65 us, 32 KB 7.30 /
  // 5.76, 128 KB 8.09 / 6.36, 256 KB 8.72 / 6.98, 1 MB 12.79 / 10.56 (NCCL 7.49, 7.68, 8.08,
  // 9.48, 15.31); but 512 KB (64 LL pieces: the next message reuses every slot) 10.34 / 11.89, which
  // the run rule keeps at the first. Safe: a deferred chunk's slot is next used by a later launch's
  // chunk, whose recv runs this first; the reads and zeroing of the slot ended with the previous
  // kernel; and each slot appears once in [defer, g_last] (at most `slots` chunks) with its newest
  // chunk, so no flag goes back. (g_last alone handed back late against none: one-GPU stand-in,
  // 8 B ping-pong one way -0.3 us.)
  if (x.blk == 0 && g0 > 0) {
    const uint64_t j = late_j;  // j = 0: chunk g0 - 1, always late
    if (j == 0 || (j < slots && j < g0 && g0 - 1 - j >= from))
      store_release_system(&c.remote->raw_slot_consumed[mod_pow2(g0 - 1 - j, slots)].v, g0 - j);
  }
  uint64_t run = 0;  // chunks of this launch
  for (int i = 0; i < c.nops; ++i) run += raw_chunks(x.ops[c.first_op + i].len, chunk, x.L->ll_max);
  const uint64_t g_last = g0 + run - 1;
  const uint64_t defer = late_from(g0, g_last, run, slots);
  const uint64_t d0 = c.direct ? load_volatile(&c.mine->direct_recvd.v) : 0;
  uint64_t t0 = 0;
  uint64_t nd = 0;  // zero-copy candidates so far
  bool failed = false;
  for (int i = 0; i < c.nops && !failed; ++i) {
    const DevOp& op = x.ops[c.first_op + i];
    const bool ll = is_ll(op.len, x.L->ll_max);
    const uint64_t piece = raw_piece(op.len, chunk, x.L->ll_max);
    const uint64_t n = raw_chunks(op.len, chunk, x.L->ll_max);
    if (c.direct && is_direct(op.len, direct_min_of(c.direct, x.L->direct_min, x.L->direct_ipc_min), x.L->ll_max)) {
      const uint64_t d = d0 + ++nd;
      bool zc = (op.flags & kOpDirectOk) != 0;
      if (op.flags & kOpDirectIpc) {
        const int z = choose_ipc(x, op, d, first_piece(x, t0) < n);
        if (z < 0) {
          failed = true;
          break;
        }
        zc = z == 1;
      } else {
        // Block 0 posts from another warp than thread 0's, which waits (as recv_pub does).
        const unsigned poster = blockDim.x > unsigned(warpSize) ? blockDim.x - 1 : 0;
        if (x.blk == 0 && threadIdx.x == poster) {
          if (zc && (op.flags & kOpGateZc)) post_gated(x, d, op);  // in place (stream_swap_device.h)
          else post_direct(x, d, reinterpret_cast<uint64_t>(zc ? op.dst : nullptr));
        }
      }
      if (zc) {
        if (x.blk == 0 && !recv_direct(x, d, g0 + t0, n, defer, slots)) {
          failed = true;
          break;
        }
        t0 += n;
        continue;
      }
    }
    uint64_t j = first_piece(x, t0);
    for (; j < n; j += uint64_t(x.nb)) {
      const uint64_t g = g0 + t0 + j;
      const uint64_t slot = mod_pow2(g, slots), off = j * piece;
      const uint64_t len = op.len - off < piece ? op.len - off : piece;
      if (threadIdx.x == 0) {
        const char* area = x.L->ll_max ? raw_ll(c.mine, slot) : nullptr;
        s_go = wait_ready_or_ll(x, &c.mine->raw_slot_ready[slot].v, g + 1, area, s_hdr);
        if (s_go == 2) {
          // LL piece: {msg low, msg len, msg high, piece index}; only messages of <= ll_max bytes.
          const uint64_t hm = (uint64_t(s_hdr[2]) << 32) | s_hdr[0];
          if (hm == msg0 + i + 1 && s_hdr[1] != op.len) {
            record_error(x, kErrRawLength);
            abort_pair(x);
            s_go = 0;
          } else if (hm != msg0 + i + 1 || s_hdr[3] != uint32_t(j) || !ll) {
            record_error(x, kErrProtocol);
            abort_pair(x);
            s_go = 0;
          }
        } else if (s_go == 1) {
          acquire(x, &c.mine->raw_slot_ready[slot].v);
          const volatile ChunkHdr& h = c.mine->hdr[slot];
          uint64_t hm = h.msg, hl = h.msg_len, ho = h.chunk_off, hc = h.chunk_len;
          if (hm == msg0 + i + 1 && hl != op.len) {
            record_error(x, kErrRawLength);
            abort_pair(x);
            s_go = 0;
          } else if (hm != msg0 + i + 1 || ho != off || hc != (op.len ? len : 0)) {
            record_error(x, kErrProtocol);
            abort_pair(x);
            s_go = 0;
          }
        }
        if (s_go && (op.flags & kOpGated) && !pass_gate(x, op, j)) s_go = 0;  // our send read chunk j first
      }
      __syncthreads();
      const int path = s_go;
      if (!path) {
        failed = true;
        break;
      }
      if (path == 2) {
        if (!ll_read(x, g + 1, raw_ll(c.mine, slot), len, op.dst + off, 0, ll_lines(len), true)) {  // ends with __syncthreads
          failed = true;
          break;
        }
      } else {
        const char* stage = reinterpret_cast<const char*>(c.mine) + x.L->staging_off + slot * chunk;
        if (op.len) part_copy(op.dst + off, stage, len, true, 0, 1);
        __syncthreads();
      }
      // Our reads first. Chunks from `defer` on are released by the next launch (see above).
      if (threadIdx.x == 0 && g < defer) store_release_system(&c.remote->raw_slot_consumed[slot].v, g + 1);
    }
    t0 += n;
  }
  const uint64_t total = t0;
  channel_exit(x, [&] {
    if (failed) return;
    c.mine->raw_recvd_msgs.v = msg0 + c.nops;
    c.mine->raw_recvd_chunks.v = g0 + total;
    c.mine->raw_recvd_deferred.v = defer;
    if (c.direct) c.mine->direct_recvd.v = d0 + nd;
  });
}

}  // namespace
}  // namespace peerlink::stream
