// Kernels of the stream-ordered engine (protocol: stream_p2p.h; launch layout: stream_launch.h).
// Several blocks per channel (stream_launch.h); in each, thread 0 does the flag work and the whole
// block copies.
// Memory ordering: a flag is published with a system-scope release store by thread 0 after a
// __syncthreads that follows the block's data stores (cumulative through the barrier, as the
// allreduce kernels do); a flag is observed by a relaxed volatile spin followed by
// fence.acq_rel.sys, and data a peer rewrites (staging slots) is read with L1-bypassing loads.
// Every spin is bounded by the global timer against Options::timeout; on expiry the error word
// (host-mapped) records it and the pair's abort word stops every later kernel on that pair at once.
#include <algorithm>

#include "gpu/device.h"
#include "peerlink/errors.h"
#include "transport/stream_ce_device.h"
#include "transport/stream_device.h"
#include "transport/stream_launch.h"

namespace peerlink::stream {
namespace {

// Published form, LL (len <= ll_max, stream_layout.h): every block of the channel writes its range of
// the message's lines (block 0 the header too) into the receiver's ring slot; no fence, no flag, no
// wait for the posted recv except the ring credit (almost always there already). False when the
// credit wait failed.
__device__ bool send_pub_ll(const Ctx& x, const DevOp& op, uint64_t k) {
  const DevChannel& c = *x.c;
  __shared__ int s_go;
  if (threadIdx.x == 0) {
    // Acquired: the receiver emptied the slot (zeroed its lines) before it posted k + 1 - kLLSlots.
    s_go = wait_ge_acquire(x, &c.mine->pub_posted.v, k + 1 <= kLLSlots ? 0 : k + 1 - kLLSlots);
  }
  __syncthreads();
  if (!s_go) return false;
  const uint32_t h[4] = {op.buf_id, uint32_t(op.len), uint32_t(op.offset), uint32_t(op.offset >> 32)};
  uint64_t l0, l1;
  ll_range(op.len, x.blk, x.nb, l0, l1);
  ll_write(ll_slot(x, c.remote, k), op.src, op.len, ll_flag(k), h, x.blk == 0, l0, l1);
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
    const DevOp& op = x.ops[c.first_op + i];
    const uint64_t k = base + i + 1;
    if (is_ll(op.len, x.L->ll_max)) {
      if (!send_pub_ll(x, op, k)) break;
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
    if (threadIdx.x == 0) {
      if (x.blk == 0) {
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

// Chunks of an NCCL-form message: LL pieces of kLLPiece bytes up to ll_max, else staging chunks;
// one empty chunk when len is 0. (Host side: StreamEngine::assign_blocks counts the same way.)
__device__ __forceinline__ uint64_t chunks_of(uint64_t len, uint64_t chunk, uint64_t ll_max) {
  const uint64_t piece = is_ll(len, ll_max) ? kLLPiece : chunk;
  return len ? div_up_pow2(len, piece) : 1;
}

// The first chunk of a message that block x.blk takes, when the message's chunks start at t0 of the
// channel's run (blocks take t = blk, blk + nb, ...).
__device__ __forceinline__ uint64_t first_piece(const Ctx& x, uint64_t t0) {
  if (x.nb == 1) return 0;  // the common case, without the divisions
  return (uint64_t(x.blk) + uint64_t(x.nb) - t0 % uint64_t(x.nb)) % uint64_t(x.nb);
}

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
    const DevOp& op = x.ops[c.first_op + i];
    const bool ll = is_ll(op.len, x.L->ll_max);
    const uint64_t n = chunks_of(op.len, chunk, x.L->ll_max);
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
        const uint64_t m = msg0 + i + 1, off = j * kLLPiece;
        const uint64_t plen = op.len - off < kLLPiece ? op.len - off : kLLPiece;
        const uint32_t h[4] = {uint32_t(m), uint32_t(op.len), uint32_t(m >> 32), uint32_t(j)};
        ll_write(raw_ll(c.remote, slot), op.src + off, plen, ll_flag(g + 1), h, true, 0, ll_lines(plen));
        __syncthreads();  // s_go is read by every thread before thread 0 rewrites it
        continue;
      }
      const uint64_t off = j * chunk;
      const uint64_t len = op.len - off < chunk ? op.len - off : chunk;
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
  // A launch hands the slot of its last chunk back only here, at the start of the channel's next
  // launch, by block 0's last thread (no stores of its own to wait for, no flag to poll): the
  // release store (a system-scope fence) at the end of every launch lay on the path to the kernel's
  // completion, and so to the next kernel of the stream. One-GPU stand-in, NCCL form, graph, A/B:
  // 8 B ping-pong one-way 3.55/3.57 -> 3.23/3.32 us, sendrecv 3.67/3.70 -> 3.49/3.51 us, 4 KB
  // -0.25 us; but 256 KB (32 LL pieces) +0.18 us and 2 MB +0.1-0.2 us, cause not found (results,
  // session 7 call 11). Safe: the sender needs slot (g0 - 1) % slots back only for chunk
  // g0 - 1 + slots, which belongs to a later message whose recv (this launch or a later one) runs
  // this release first; the reads and zeroing of that slot ended with the previous kernel. Later
  // releases of the same slot in this launch follow chunks the sender could only stage after seeing
  // this one, so the flag never goes back.
  if (x.blk == 0 && threadIdx.x == blockDim.x - 1 && g0 > 0)
    store_release_system(&c.remote->raw_slot_consumed[mod_pow2(g0 - 1, slots)].v, g0);
  uint64_t run = 0;  // chunks of this launch
  for (int i = 0; i < c.nops; ++i) run += chunks_of(x.ops[c.first_op + i].len, chunk, x.L->ll_max);
  const uint64_t g_last = g0 + run - 1;
  uint64_t t0 = 0;
  bool failed = false;
  for (int i = 0; i < c.nops && !failed; ++i) {
    const DevOp& op = x.ops[c.first_op + i];
    const bool ll = is_ll(op.len, x.L->ll_max);
    const uint64_t piece = ll ? kLLPiece : chunk;
    const uint64_t n = chunks_of(op.len, chunk, x.L->ll_max);
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
      // Our reads first. The launch's last chunk is released by the next launch (see above).
      if (threadIdx.x == 0 && g != g_last) store_release_system(&c.remote->raw_slot_consumed[slot].v, g + 1);
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
template <int Ops, int Channels>
__global__ void __launch_bounds__(kThreads, 1) stream_batch_kernel(const PL_GRID_CONSTANT StreamLaunchOf<Ops, Channels> L) {
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
  Ctx x{&L, L.ops, &ch, &ch.mine->error.v, int(blockIdx.x) - ch.first_block, ch.nblocks};
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
    case kChCeWait: ce_wait(x); break;
    case kChCeDone: ce_done(x); break;
  }
}

}  // namespace

void launch_stream_batch(const StreamLaunch& l, void* stream) {
  const auto st = static_cast<gpu::rt::Stream>(stream);
  int nops = 0;
  for (int c = 0; c < l.nch; ++c) nops = std::max(nops, l.ch[c].first_op + l.ch[c].nops);
  if (l.nch <= kSmallLaunchChannels && nops <= kSmallLaunchOps) {
    StreamLaunchOf<kSmallLaunchOps, kSmallLaunchChannels> s{};
    static_cast<StreamLaunchHeader&>(s) = l;
    std::copy(l.ops, l.ops + nops, s.ops);
    std::copy(l.ch, l.ch + l.nch, s.ch);
    gpu::dev::launch(stream_batch_kernel<kSmallLaunchOps, kSmallLaunchChannels>, unsigned(l.nblocks),
                     unsigned(l.threads), st, l.pdl != 0, s);
  } else {
    gpu::dev::launch(stream_batch_kernel<kMaxLaunchOps, kMaxLaunchChannels>, unsigned(l.nblocks), unsigned(l.threads),
                     st, l.pdl != 0, static_cast<const FullLaunch&>(l));
  }
  gpu::dev::check_launch("stream send/recv kernel launch");  // GpuError: error string, code and device
}

}  // namespace peerlink::stream
