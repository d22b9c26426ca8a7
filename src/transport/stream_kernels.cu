// Kernels of the stream-ordered engine (protocol: stream_p2p.h; launch layout: stream_launch.h).
// One block per channel; thread 0 does the flag work, the whole block copies.
// Memory ordering: a flag is published with a system-scope release store by thread 0 after a
// __syncthreads that follows the block's data stores (cumulative through the barrier, as the
// allreduce kernels do); a flag is observed by a relaxed volatile spin followed by
// fence.acq_rel.sys, and data a peer rewrites (staging slots) is read with L1-bypassing loads.
// Every spin is bounded by the global timer against Options::timeout; on expiry the error word
// (host-mapped) records it and the pair's abort word stops every later kernel on that pair at once.
#include "gpu/device.h"
#include "peerlink/errors.h"
#include "transport/stream_launch.h"

namespace peerlink::stream {
namespace {

using gpu::dev::fence_acq_rel_system;
using gpu::dev::now_ns;
using gpu::dev::store_release_system;
__device__ __forceinline__ uint64_t load_volatile(const uint64_t* p) { return *reinterpret_cast<const volatile uint64_t*>(p); }

constexpr int kThreads = 512;
constexpr uint64_t kFlagsBytes = flags_bytes();  // a constant, usable in device code

struct Ctx {
  const StreamLaunch* L;
  const DevChannel* c;
  uint64_t* abort;  // c->mine->error.v: set once the pair failed
};

__device__ void record_error(const Ctx& x, uint32_t code) {
  volatile uint32_t* err = x.L->error;
  if (*err == 0) *err = code | (uint32_t(x.c->peer) << 8);
  __threadfence_system();
}

// Thread 0: waits until *f >= target. False on timeout (recorded; the pair aborts) or abort.
__device__ bool wait_ge(const Ctx& x, const uint64_t* f, uint64_t target) {
  if (load_volatile(f) >= target) return true;
  uint64_t t0 = now_ns();
  for (uint32_t n = 1;; ++n) {
    if (load_volatile(f) >= target) return true;
    if ((n & 127) == 0) {
      if (load_volatile(x.abort)) return false;
      if (now_ns() - t0 > x.L->timeout_ns) {
        record_error(x, kErrTimeout);
        *reinterpret_cast<volatile uint64_t*>(x.abort) = 1;
        return false;
      }
    }
  }
}

// Block-wide copy of n bytes; `fresh`: src is rewritten by a peer (read through L2, not L1).
__device__ void block_copy(char* dst, const char* src, uint64_t n, bool fresh) {
  uint64_t head = 0;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
    const uint64_t n16 = n / 16;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (uint64_t i = threadIdx.x; i < n16; i += blockDim.x) {
#if defined(PEERLINK_HIP)
      uint4 v = fresh ? *reinterpret_cast<const volatile uint4*>(s + i) : s[i];
#else
      uint4 v = fresh ? __ldcg(s + i) : s[i];
#endif
      d[i] = v;
    }
    head = n16 * 16;
  }
  for (uint64_t i = head + threadIdx.x; i < n; i += blockDim.x)
    dst[i] = fresh ? *reinterpret_cast<const volatile char*>(src + i) : src[i];
}

__device__ void send_pub(const Ctx& x) {
  const DevChannel& c = *x.c;
  __shared__ int s_go, s_ok;
  uint64_t base = load_volatile(&c.mine->pub_sent.v);
  int i = 0;
  for (; i < c.nops; ++i) {
    const DevOp& op = x.L->ops[c.first_op + i];
    const uint64_t k = base + i + 1;
    if (threadIdx.x == 0) {
      s_go = wait_ge(x, &c.mine->pub_posted.v, k);
      s_ok = 0;
      if (s_go) {
        fence_acq_rel_system();
        const volatile PostDesc& p = c.mine->post[k % kDescRing];
        if (p.seq != k) {
          record_error(x, kErrProtocol);
          *reinterpret_cast<volatile uint64_t*>(x.abort) = 1;
          s_go = 0;
        } else {
          s_ok = p.buf_id == op.buf_id && p.offset == op.offset && p.len == op.len;
        }
      }
    }
    __syncthreads();
    if (!s_go) break;
    if (s_ok) block_copy(op.dst, op.src, op.len, false);  // mismatch: nothing written
    __syncthreads();
    if (threadIdx.x == 0) {
      volatile ReadyDesc& d = c.remote->ready[k % kDescRing];
      d.seq = k;
      d.offset = op.offset;
      d.len = op.len;
      d.buf_id = op.buf_id;
      d.status = s_ok ? kStatusOk : kStatusMismatch;
      store_release_system(&c.remote->pub_ready.v, k);
    }
  }
  // Advances by every op of the launch even after a failure (the pair is aborted then anyway), so
  // the counters of a healthy pair are always base + nops.
  if (threadIdx.x == 0) c.mine->pub_sent.v = base + c.nops;
}

__device__ void recv_pub(const Ctx& x) {
  const DevChannel& c = *x.c;
  uint64_t base = load_volatile(&c.mine->pub_recvd.v);
  if (threadIdx.x == 0) {
    for (int i = 0; i < c.nops; ++i) {
      const DevOp& op = x.L->ops[c.first_op + i];
      const uint64_t k = base + i + 1;
      volatile PostDesc& p = c.remote->post[k % kDescRing];
      p.seq = k;
      p.offset = op.offset;
      p.len = op.len;
      p.buf_id = op.buf_id;
      store_release_system(&c.remote->pub_posted.v, k);
      if (!wait_ge(x, &c.mine->pub_ready.v, k)) break;
      fence_acq_rel_system();  // the sender's bytes in our buffer are visible to this stream's next kernels
      const volatile ReadyDesc& d = c.mine->ready[k % kDescRing];
      if (d.seq != k) {
        record_error(x, kErrProtocol);
        *reinterpret_cast<volatile uint64_t*>(x.abort) = 1;
        break;
      }
      if (d.status != kStatusOk) record_error(x, kErrMismatch);
    }
    c.mine->pub_recvd.v = base + c.nops;
  }
}

__device__ void send_raw(const Ctx& x) {
  const DevChannel& c = *x.c;
  const uint64_t chunk = x.L->chunk, slots = x.L->slots;
  __shared__ int s_go;
  uint64_t msg = load_volatile(&c.mine->raw_sent_msgs.v);
  uint64_t g = load_volatile(&c.mine->raw_sent_chunks.v);
  bool failed = false;
  for (int i = 0; i < c.nops && !failed; ++i) {
    const DevOp& op = x.L->ops[c.first_op + i];
    ++msg;
    const uint64_t n = op.len ? (op.len + chunk - 1) / chunk : 1;
    for (uint64_t j = 0; j < n; ++j, ++g) {
      if (threadIdx.x == 0) {
        s_go = g + 1 <= slots || wait_ge(x, &c.mine->raw_consumed.v, g + 1 - slots);
        if (s_go) fence_acq_rel_system();  // the receiver's reads of the slot happened before
      }
      __syncthreads();
      if (!s_go) {
        failed = true;
        break;
      }
      const uint64_t off = j * chunk;
      const uint64_t len = op.len - off < chunk ? op.len - off : chunk;
      const uint64_t slot = g % slots;
      char* stage = reinterpret_cast<char*>(c.remote) + kFlagsBytes + slot * chunk;
      if (op.len) block_copy(stage, op.src + off, len, false);
      __syncthreads();
      if (threadIdx.x == 0) {
        volatile ChunkHdr& h = c.remote->hdr[slot];
        h.msg = msg;
        h.msg_len = op.len;
        h.chunk_off = off;
        h.chunk_len = op.len ? len : 0;
        store_release_system(&c.remote->raw_ready.v, g + 1);
      }
    }
  }
  if (threadIdx.x == 0 && !failed) {
    c.mine->raw_sent_msgs.v = msg;
    c.mine->raw_sent_chunks.v = g;
  }
}

__device__ void recv_raw(const Ctx& x) {
  const DevChannel& c = *x.c;
  const uint64_t chunk = x.L->chunk, slots = x.L->slots;
  __shared__ int s_go, s_drain;
  __shared__ uint64_t s_msg_len;
  uint64_t msg = load_volatile(&c.mine->raw_recvd_msgs.v);
  uint64_t g = load_volatile(&c.mine->raw_recvd_chunks.v);
  bool failed = false;
  for (int i = 0; i < c.nops && !failed; ++i) {
    const DevOp& op = x.L->ops[c.first_op + i];
    ++msg;
    uint64_t n = 1;
    for (uint64_t j = 0; j < n; ++j, ++g) {
      const uint64_t slot = g % slots, off = j * chunk;
      if (threadIdx.x == 0) {
        s_go = wait_ge(x, &c.mine->raw_ready.v, g + 1);
        if (s_go) {
          fence_acq_rel_system();
          const volatile ChunkHdr& h = c.mine->hdr[slot];
          uint64_t hm = h.msg, hl = h.msg_len, ho = h.chunk_off, hc = h.chunk_len;
          if (j == 0) {
            s_msg_len = hl;
            s_drain = hm == msg && hl != op.len;  // length mismatch: consume the sender's chunks, write nothing
            if (s_drain) record_error(x, kErrMismatch);
          }
          uint64_t want = s_msg_len - off < chunk ? s_msg_len - off : chunk;
          if (hm != msg || hl != s_msg_len || ho != off || hc != (s_msg_len ? want : 0)) {
            record_error(x, kErrProtocol);
            *reinterpret_cast<volatile uint64_t*>(x.abort) = 1;
            s_go = 0;
          }
        }
      }
      __syncthreads();
      if (!s_go) {
        failed = true;
        break;
      }
      const uint64_t ml = s_msg_len;
      n = ml ? (ml + chunk - 1) / chunk : 1;
      const uint64_t len = ml - off < chunk ? ml - off : chunk;
      const char* stage = reinterpret_cast<const char*>(c.mine) + kFlagsBytes + slot * chunk;
      if (!s_drain && ml) block_copy(op.dst + off, stage, len, true);
      __syncthreads();
      if (threadIdx.x == 0) store_release_system(&c.remote->raw_consumed.v, g + 1);  // orders our reads first
    }
  }
  if (threadIdx.x == 0 && !failed) {
    c.mine->raw_recvd_msgs.v = msg;
    c.mine->raw_recvd_chunks.v = g;
  }
}

// The parameter block is read in place (no per-thread copy when its address is taken).
#if !defined(PEERLINK_HIP) && defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ >= 12
#define PL_GRID_CONSTANT __grid_constant__
#else
#define PL_GRID_CONSTANT
#endif

__global__ void __launch_bounds__(kThreads) stream_batch_kernel(const PL_GRID_CONSTANT StreamLaunch L) {
  Ctx x{&L, &L.ch[blockIdx.x], &L.ch[blockIdx.x].mine->error.v};
  if (load_volatile(x.abort)) return;  // the pair failed earlier: the host reports it, never wait again
  switch (x.c->kind) {
    case 0: send_pub(x); break;
    case 1: recv_pub(x); break;
    case 2: send_raw(x); break;
    case 3: recv_raw(x); break;
  }
}

}  // namespace

void launch_stream_batch(const StreamLaunch& l, void* stream) {
  gpu::dev::launch(stream_batch_kernel, l.nch, kThreads, static_cast<gpu::rt::Stream>(stream), false, l);
  gpu::dev::check_launch("stream send/recv kernel launch");  // GpuError: error string, code and device
}

}  // namespace peerlink::stream
