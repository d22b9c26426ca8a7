// Kernels of the stream-ordered engine (protocol: stream_p2p.h; launch layout: stream_launch.h).
// Several blocks per channel (stream_launch.h); in each, thread 0 does the flag work and the whole
// block copies.
// Memory ordering: a flag is published with a system-scope release store by thread 0 after a
// __syncthreads that follows the block's data stores (cumulative through the barrier, as the
// allreduce kernels do); a flag is observed by a relaxed volatile spin followed by
// fence.acq_rel.sys, and data a peer rewrites (staging slots) is read with L1-bypassing loads.
// Every spin is bounded by the global timer against Options::timeout; on expiry the error word
// (host-mapped) records it and the pair's abort word stops every later kernel on that pair at once.
#include "gpu/device.h"
#include "peerlink/errors.h"
#include "transport/stream_device.h"
#include "transport/stream_launch.h"

namespace peerlink::stream {
namespace {

// Published form, len <= kLLMax (stream_layout.h): block 0 of the channel writes header and data
// as LL lines into the receiver's ring slot; no fence, no flag, no wait for the posted recv except
// the ring credit (almost always there already). False when the credit wait failed.
__device__ bool send_pub_ll(const Ctx& x, const DevOp& op, uint64_t k) {
  const DevChannel& c = *x.c;
  __shared__ int s_go;
  if (threadIdx.x == 0) {
    s_go = k + 1 <= kLLSlots || wait_ge(x, &c.mine->pub_posted.v, k + 1 - kLLSlots);
    if (s_go) fence_acq_rel_system();  // the receiver emptied the slot (zeroed its lines) before
  }
  __syncthreads();
  if (!s_go) return false;
  ll_write(ll_slot(c.remote, k), op.src, op.len, ll_flag(k), op.buf_id, uint32_t(op.offset),
           uint32_t(op.offset >> 32));
  __syncthreads();  // s_go is read by every thread before thread 0 rewrites it for the next message
  return true;
}

// Published form: every block of the channel waits for the posted recv (a local spin), checks the
// descriptor, copies its share straight into the receiver's buffer; the last block to finish
// message k (pub_arrive) writes the ReadyDesc and release-stores pub_ready = k.
__device__ void send_pub(const Ctx& x) {
  const DevChannel& c = *x.c;
  __shared__ int s_go, s_ok;
  const uint64_t base = load_volatile(&c.mine->pub_sent.v);
  for (int i = 0; i < c.nops; ++i) {
    const DevOp& op = x.L->ops[c.first_op + i];
    const uint64_t k = base + i + 1;
    if (op.len <= kLLMax) {  // small: LL lines by block 0; the other blocks have nothing to do for it
      if (x.blk == 0 && !send_pub_ll(x, op, k)) break;
      continue;
    }
    if (threadIdx.x == 0) {
      s_go = wait_ge(x, &c.mine->pub_posted.v, k);
      s_ok = 0;
      if (s_go) {
        fence_acq_rel_system();
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
      bool last = true;
      if (x.nb > 1) {
        // Our block's NVLink stores (ordered before this thread by the barrier) are visible system-wide
        // before the count says so; the last block's acquire below then orders them before pub_ready.
        fence_system();
        unsigned long long* a = reinterpret_cast<unsigned long long*>(&c.mine->pub_arrive[k % kDescRing]);
        last = atomicAdd(a, 1ull) == uint64_t(x.nb - 1);
        if (last) {
          // Message k + kDescRing is posted only after the receiver saw pub_ready = k (below): no
          // block can count for it before this reset.
          atomicExch(a, 0ull);
          fence_acq_rel_system();
        }
      }
      if (last) {
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

__device__ void recv_pub(const Ctx& x) {
  const DevChannel& c = *x.c;
  __shared__ int s_path;
  __shared__ uint32_t s_hdr[4];
  const uint64_t base = load_volatile(&c.mine->pub_recvd.v);
  for (int i = 0; i < c.nops; ++i) {
    const DevOp& op = x.L->ops[c.first_op + i];
    const uint64_t k = base + i + 1;
    char* slot = ll_slot(c.mine, k);
    if (threadIdx.x == 0) {
      volatile PostDesc& p = c.remote->post[k % kDescRing];
      p.seq = k;
      p.offset = op.offset;
      p.len = op.len;
      p.buf_id = op.buf_id;
      store_release_system(&c.remote->pub_posted.v, k);
      s_path = wait_ready_or_ll(x, &c.mine->pub_ready.v, k, slot, s_hdr);
      if (s_path == 1) {
        fence_acq_rel_system();  // the sender's bytes in our buffer are visible to this stream's next kernels
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
      if (hlen > kLLMax) {  // a header no sender of this build writes
        if (threadIdx.x == 0) {
          record_error(x, kErrProtocol);
          abort_pair(x);
        }
        break;
      }
      const bool ok = s_hdr[0] == op.buf_id && hlen == op.len && hoff == op.offset;
      if (!ok && threadIdx.x == 0) record_error(x, kErrMismatch);  // drained below, nothing written
      if (!ll_read(x, k, slot, hlen, ok ? op.dst : nullptr)) break;
    }
    __syncthreads();  // s_path / s_hdr are rewritten for the next message
  }
  channel_exit(x, [&] { c.mine->pub_recvd.v = base + c.nops; });
}

__device__ __forceinline__ uint64_t chunks_of(uint64_t len, uint64_t chunk) { return len ? (len + chunk - 1) / chunk : 1; }

// NCCL form, sender. The channel's messages are one run of chunks g0, g0 + 1, ... (a message of
// len bytes is chunks_of(len) chunks; an empty one is one empty chunk); block b takes chunks
// t = b, b + nb, ... of the run. Chunk g goes through slot g % slots: wait until its previous
// occupant (g - slots) was consumed, copy, write the header, release-store raw_slot_ready = g + 1.
__device__ void send_raw(const Ctx& x) {
  const DevChannel& c = *x.c;
  const uint64_t chunk = x.L->chunk, slots = x.L->slots;
  __shared__ int s_go;
  const uint64_t msg0 = load_volatile(&c.mine->raw_sent_msgs.v);
  const uint64_t g0 = load_volatile(&c.mine->raw_sent_chunks.v);
  uint64_t t0 = 0;  // first chunk of op i within the run
  bool failed = false;
  for (int i = 0; i < c.nops && !failed; ++i) {
    const DevOp& op = x.L->ops[c.first_op + i];
    const uint64_t n = chunks_of(op.len, chunk);
    uint64_t j = (uint64_t(x.blk) + uint64_t(x.nb) - t0 % uint64_t(x.nb)) % uint64_t(x.nb);
    for (; j < n; j += uint64_t(x.nb)) {
      const uint64_t g = g0 + t0 + j;
      const uint64_t slot = g % slots;
      if (threadIdx.x == 0) {
        s_go = g + 1 <= slots || wait_ge(x, &c.mine->raw_slot_consumed[slot].v, g + 1 - slots);
        if (s_go) fence_acq_rel_system();  // the receiver's reads of the slot happened before
      }
      __syncthreads();
      if (!s_go) {
        failed = true;
        break;
      }
      if (op.len <= kLLMax) {
        // One chunk, as LL lines into the slot's LL area (stream_layout.h): no fence, no flag.
        const uint64_t m = msg0 + i + 1;
        ll_write(raw_ll(c.remote, slot), op.src, op.len, ll_flag(g + 1), uint32_t(m), uint32_t(m >> 32), 0);
        __syncthreads();  // s_go is read by every thread before thread 0 rewrites it
        continue;
      }
      const uint64_t off = j * chunk;
      const uint64_t len = op.len - off < chunk ? op.len - off : chunk;
      char* stage = reinterpret_cast<char*>(c.remote) + kStagingOff + slot * chunk;
      if (op.len) part_copy(stage, op.src + off, len, false, 0, 1);
      __syncthreads();
      if (threadIdx.x == 0) {
        volatile ChunkHdr& h = c.remote->hdr[slot];
        h.msg = msg0 + i + 1;
        h.msg_len = op.len;
        h.chunk_off = off;
        h.chunk_len = op.len ? len : 0;
        store_release_system(&c.remote->raw_slot_ready[slot].v, g + 1);
      }
    }
    t0 += n;
  }
  const uint64_t total = t0;  // only meaningful when the loop ran to its end
  channel_exit(x, [&] {
    if (failed) return;  // the pair is aborted: the counters no longer matter
    c.mine->raw_sent_msgs.v = msg0 + c.nops;
    c.mine->raw_sent_chunks.v = g0 + total;
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
  uint64_t t0 = 0;
  bool failed = false;
  for (int i = 0; i < c.nops && !failed; ++i) {
    const DevOp& op = x.L->ops[c.first_op + i];
    const uint64_t n = chunks_of(op.len, chunk);
    uint64_t j = (uint64_t(x.blk) + uint64_t(x.nb) - t0 % uint64_t(x.nb)) % uint64_t(x.nb);
    for (; j < n; j += uint64_t(x.nb)) {
      const uint64_t g = g0 + t0 + j;
      const uint64_t slot = g % slots, off = j * chunk;
      const uint64_t len = op.len - off < chunk ? op.len - off : chunk;
      if (threadIdx.x == 0) {
        s_go = wait_ready_or_ll(x, &c.mine->raw_slot_ready[slot].v, g + 1, raw_ll(c.mine, slot), s_hdr);
        if (s_go == 2) {
          // LL: {msg low, len, msg high, 0}; only whole messages of <= kLLMax bytes come this way.
          const uint64_t hm = (uint64_t(s_hdr[2]) << 32) | s_hdr[0];
          if (hm == msg0 + i + 1 && s_hdr[1] != op.len) {
            record_error(x, kErrRawLength);
            abort_pair(x);
            s_go = 0;
          } else if (hm != msg0 + i + 1 || s_hdr[3] != 0 || j != 0) {
            record_error(x, kErrProtocol);
            abort_pair(x);
            s_go = 0;
          }
        } else if (s_go == 1) {
          fence_acq_rel_system();
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
      }
      __syncthreads();
      const int path = s_go;
      if (!path) {
        failed = true;
        break;
      }
      if (path == 2) {
        if (!ll_read(x, g + 1, raw_ll(c.mine, slot), op.len, op.dst)) {  // ends with __syncthreads
          failed = true;
          break;
        }
      } else {
        const char* stage = reinterpret_cast<const char*>(c.mine) + kStagingOff + slot * chunk;
        if (op.len) part_copy(op.dst + off, stage, len, true, 0, 1);
        __syncthreads();
      }
      if (threadIdx.x == 0) store_release_system(&c.remote->raw_slot_consumed[slot].v, g + 1);  // our reads first
    }
    t0 += n;
  }
  const uint64_t total = t0;
  channel_exit(x, [&] {
    if (failed) return;
    c.mine->raw_recvd_msgs.v = msg0 + c.nops;
    c.mine->raw_recvd_chunks.v = g0 + total;
  });
}

// The parameter block is read in place (no per-thread copy when its address is taken).
#if !defined(PEERLINK_HIP) && defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ >= 12
#define PL_GRID_CONSTANT __grid_constant__
#else
#define PL_GRID_CONSTANT
#endif

// One block per multiprocessor is guaranteed to fit (the host caps the grid at the SM count), so all
// blocks of a launch are resident together and the channels of a group cannot starve each other.
__global__ void __launch_bounds__(kThreads, 1) stream_batch_kernel(const PL_GRID_CONSTANT StreamLaunch L) {
  // PDL (when launched with it): this kernel may have been scheduled while the previous kernel of
  // the stream still runs. Everything below reads what that kernel may write (the user's source
  // buffer, our channel counters when it is one of ours), so wait first; then let the next kernel of
  // the stream be scheduled: it overlaps its launch with our run and waits in its own
  // griddepcontrol.wait for our completion (a kernel launched with PDL that skips that wait may read
  // a recv buffer before the bytes landed: the same contract as the allreduce's PDL).
  pdl_wait();
  pdl_launch_dependents();
  int ci = 0;  // the channel whose block range holds this block (ranges are not in channel order)
  for (int c = 0; c < L.nch; ++c)
    if (int(blockIdx.x) >= L.ch[c].first_block && int(blockIdx.x) < L.ch[c].first_block + L.ch[c].nblocks) ci = c;
  const DevChannel& ch = L.ch[ci];
  Ctx x{&L, &ch, &ch.mine->error.v, int(blockIdx.x) - ch.first_block, ch.nblocks};
  if (load_volatile(x.abort)) {
    // The pair failed earlier (here or on the peer): never wait again; make sure the host hears of it.
    if (threadIdx.x == 0) record_error(x, kErrAborted);
    return;
  }
  switch (ch.kind) {
    case 0: send_pub(x); break;
    case 1: recv_pub(x); break;
    case 2: send_raw(x); break;
    case 3: recv_raw(x); break;
  }
}

}  // namespace

void launch_stream_batch(const StreamLaunch& l, void* stream) {
  gpu::dev::launch(stream_batch_kernel, unsigned(l.nblocks), kThreads, static_cast<gpu::rt::Stream>(stream),
                   l.pdl != 0, l);
  gpu::dev::check_launch("stream send/recv kernel launch");  // GpuError: error string, code and device
}

}  // namespace peerlink::stream
