// Device side of the LL line format shared by both stream send/recv forms (stream_layout.h): the
// flag, the slot addresses, the split of a message's lines over blocks, the writer, the receiver's
// wait for a message, and the line reader. Included by stream_pub_device.h and stream_raw_device.h
// (one translation unit: stream_kernels.cu).
#pragma once
#include "stream/stream_device.h"

namespace peerlink::stream {
namespace {  // one translation unit includes this

constexpr uint64_t kRawLLOff = raw_ll_offset();  // constants, usable in device code
constexpr uint64_t kPubLLOff = pub_ll_offset();

// The LL flag of message (or NCCL-form chunk + 1) k: never 0 (a zeroed line never matches).
__device__ __forceinline__ uint32_t ll_flag(uint64_t k) { return uint32_t(k % 0xFFFFFFFFull) + 1; }

// Published form: ring slot of message k in section s (stride L.ll_slot).
__device__ __forceinline__ char* ll_slot(const Ctx& x, PairSection* s, uint64_t k) {
  return reinterpret_cast<char*>(s) + kPubLLOff + (k % kLLSlots) * x.L->ll_slot;
}
// NCCL form: the LL area of staging slot `slot`.
__device__ __forceinline__ char* raw_ll(PairSection* s, uint64_t slot) {
  return reinterpret_cast<char*>(s) + kRawLLOff + slot * kLLSlotBytes;
}

// Lines [l0, l1) of a message of `len` bytes split over `parts` blocks, `part` being this one.
__device__ __forceinline__ void ll_range(uint64_t len, int part, int parts, uint64_t& l0, uint64_t& l1) {
  const uint64_t lines = (len + 7) / 8;
  if (parts == 1) {  // the common case, without the division
    l0 = 0;
    l1 = lines;
    return;
  }
  const uint64_t per = (lines + uint64_t(parts) - 1) / uint64_t(parts);
  l0 = per * uint64_t(part) < lines ? per * uint64_t(part) : lines;
  l1 = l0 + per < lines ? l0 + per : lines;
}

// The thread's first data word of an LL write (line l0 + threadIdx.x of src's len bytes), loaded
// before the sender's credit is known, so that the two loads overlap: a whole aligned word only,
// in one load (else `have` is false and ll_write loads it).
struct FirstWord {
  uint64_t v = 0;
  bool have = false;
};
__device__ __forceinline__ FirstWord ll_first_word(const char* src, uint64_t len, uint64_t l0, uint64_t l1) {
  FirstWord w;
  const uint64_t i = l0 + threadIdx.x;
  if (i < l1 && (reinterpret_cast<uintptr_t>(src) & 7) == 0 && 8 * i + 8 <= len) {
    w.v = *reinterpret_cast<const uint64_t*>(src + 8 * i);
    w.have = true;
  }
  return w;
}

// All threads of the block: the header lines {h[0], f, h[1], f} {h[2], f, h[3], f} when `header`, then
// data lines [l0, l1) of src's `len` bytes as {lo, f, hi, f}. Plain volatile stores into the peer's
// memory: no fence, no flag. `first`: the thread's first line, when ll_first_word loaded it.
__device__ void ll_write(char* slot, const char* src, uint64_t len, uint32_t f, const uint32_t* h, bool header,
                         uint64_t l0, uint64_t l1, FirstWord first = {}) {
  if (header && threadIdx.x == 0) {
    store_volatile_16(slot, h[0], f, h[1], f);
    store_volatile_16(slot + 16, h[2], f, h[3], f);
  }
  const bool aligned = (reinterpret_cast<uintptr_t>(src) & 7) == 0;
  auto word = [&](uint64_t i) {
    uint64_t v = 0;
    if (aligned && 8 * i + 8 <= len) {
      v = *reinterpret_cast<const uint64_t*>(src + 8 * i);
    } else {
      for (uint64_t b = 8 * i; b < len && b < 8 * i + 8; ++b) v |= uint64_t(uint8_t(src[b])) << (8 * (b - 8 * i));
    }
    return v;
  };
  // At most one line per thread (every message up to 4 KB at 512 threads): a single store. The
  // pair loop below cost those sizes 0.1 us on the stand-in.
  const uint64_t bd = blockDim.x;
  if (l1 - l0 <= bd) {
    const uint64_t i = l0 + threadIdx.x;
    if (i < l1) {
      const uint64_t v = first.have ? first.v : word(i);
      store_volatile_16(slot + 32 + 16 * i, uint32_t(v), f, uint32_t(v >> 32), f);
    }
    return;
  }
  // Two lines per pass, both words loaded before either store (the volatile stores keep the
  // compiler from hoisting the next pass's load above them): a thread with two lines (every
  // message above 4 KB at 512 threads) waits for one source load latency, not two.
  for (uint64_t i = l0 + threadIdx.x; i < l1; i += 2 * bd) {
    const uint64_t j = i + bd;
    const uint64_t vi = first.have && i == l0 + threadIdx.x ? first.v : word(i);
    const uint64_t vj = j < l1 ? word(j) : 0;
    store_volatile_16(slot + 32 + 16 * i, uint32_t(vi), f, uint32_t(vi >> 32), f);
    if (j < l1) store_volatile_16(slot + 32 + 16 * j, uint32_t(vj), f, uint32_t(vj >> 32), f);
  }
}

// Published form, receiver (thread 0 of each of its blocks, after block 0 posted recv k): waits for
// whichever way the sender's message k comes: pub_ready >= k (direct or copy-engine copy, ReadyDesc
// tells how it went) or the LL header in ring slot k % kLLSlots (the sender chooses by its length,
// so a length mismatch across the ll_max boundary is still seen as a mismatch, never a hang). slot
// nullptr: LL is off. Returns 1 direct, 2 LL, 0 failed. (Also the NCCL form's wait for chunk g:
// ready = raw_slot_ready[slot], k = g + 1.)
// The flag and both header lines are loaded together, then tested: one memory latency per round
// (tested one after the other they were three, and the message landing mid-round waited for them).
__device__ int wait_ready_or_ll(const Ctx& x, const uint64_t* ready, uint64_t k, const char* slot, uint32_t* hdr) {
  const uint32_t f = ll_flag(k);
  uint64_t t0 = 0;
  for (uint32_t n = 0;; ++n) {
    const uint64_t r = load_volatile(ready);
    uint32_t a = 0, fa = 0, b = 0, fb = 0, c2 = 0, fc = 0, d = 0, fd = 0;
    if (slot) {
      load_volatile_16(slot, a, fa, b, fb);
      load_volatile_16(slot + 16, c2, fc, d, fd);
    }
    if (r >= k) return 1;
    if (slot && fa == f && fb == f && fc == f && fd == f) {  // published: {buf_id, len, offset low, offset high}
      hdr[0] = a;
      hdr[1] = b;
      hdr[2] = c2;
      hdr[3] = d;
      return 2;
    }
    if (n == 0) t0 = now_ns();
    if ((n & 127) == 127 && wait_failed(x, t0)) return 0;
  }
}

// One thread: waits until the LL line at `line`, already loaded once as {lo, flo, hi, fhi}, carries
// flag f. False on timeout (recorded; the pair aborts), abort, or another thread's failure (*fail).
__device__ bool ll_wait_line(const Ctx& x, const char* line, uint32_t f, uint32_t& lo, uint32_t& hi, uint32_t flo,
                             uint32_t fhi, volatile int* fail) {
  if (flo == f && fhi == f) return true;
  const uint64_t t0 = now_ns();
  for (uint32_t n = 1;; ++n) {
    load_volatile_16(line, lo, flo, hi, fhi);
    if (flo == f && fhi == f) return true;
    if ((n & 1023) == 0) {
      if (load_volatile(x.abort) || *fail) {
        *fail = 1;
        return false;
      }
      if (now_ns() - t0 > x.L->timeout_ns) {
        record_error(x, kErrTimeout);
        abort_pair(x);
        *fail = 1;
        return false;
      }
    }
  }
}

// All threads: waits for data lines [l0, l1) of an LL message of `len` bytes, copies their bytes to
// dst (nullptr: a mismatch, nothing written) and zeroes them; with `zero_header` thread 0 zeroes the
// two header lines too. False when a wait ran out (recorded; the pair aborts). Ends with a
// __syncthreads: every line read and zeroed before thread 0 gives the credit back.
__device__ bool ll_read(const Ctx& x, uint64_t k, char* slot, uint64_t len, char* dst, uint64_t l0, uint64_t l1,
                        bool zero_header) {
  __shared__ int s_fail;
  if (threadIdx.x == 0) s_fail = 0;
  __syncthreads();
  volatile int* fail = &s_fail;
  const uint32_t f = ll_flag(k);
  const bool aligned = (reinterpret_cast<uintptr_t>(dst) & 7) == 0;
  auto emit = [&](uint64_t i, uint32_t lo, uint32_t hi) {
    const uint64_t v = (uint64_t(hi) << 32) | lo;
    if (!dst) return;
    if (aligned && 8 * i + 8 <= len) {
      *reinterpret_cast<uint64_t*>(dst + 8 * i) = v;
    } else {
      for (uint64_t b = 8 * i; b < len && b < 8 * i + 8; ++b) dst[b] = char(uint8_t(v >> (8 * (b - 8 * i))));
    }
  };
  auto take = [&](uint64_t i, char* line, uint32_t lo, uint32_t hi) {  // copy out, then empty the line
    emit(i, lo, hi);
    store_volatile_16(line, 0, 0, 0, 0);
  };
  const uint64_t bd = blockDim.x;
  if (l1 - l0 <= bd) {  // at most one line per thread (as in ll_write)
    const uint64_t i = l0 + threadIdx.x;
    if (i < l1) {
      char* li = slot + 32 + 16 * i;
      uint32_t a0, fa0, a1, fa1;
      load_volatile_16(li, a0, fa0, a1, fa1);
      if (ll_wait_line(x, li, f, a0, a1, fa0, fa1, fail)) take(i, li, a0, a1);
    }
  }
  // Two lines per pass, both loaded before either is waited for (as ll_write stores them): a thread
  // with two lines pays one memory latency when both have landed, not two. (The loop's second test
  // repeats the branch above; written as an else, the generated code differs from the measured one.)
  for (uint64_t i = l0 + threadIdx.x; i < l1 && l1 - l0 > bd; i += 2 * bd) {
    const uint64_t j = i + bd;
    const bool two = j < l1;
    char* li = slot + 32 + 16 * i;
    char* lj = slot + 32 + 16 * j;
    uint32_t a0, fa0, a1, fa1, b0 = 0, fb0 = 0, b1 = 0, fb1 = 0;
    load_volatile_16(li, a0, fa0, a1, fa1);
    if (two) load_volatile_16(lj, b0, fb0, b1, fb1);
    if (!ll_wait_line(x, li, f, a0, a1, fa0, fa1, fail)) break;
    if (two && !ll_wait_line(x, lj, f, b0, b1, fb0, fb1, fail)) break;
    if (*fail) break;
    take(i, li, a0, a1);
    if (two) take(j, lj, b0, b1);
  }
  if (zero_header && threadIdx.x == 0) {
    store_volatile_16(slot, 0, 0, 0, 0);
    store_volatile_16(slot + 16, 0, 0, 0, 0);
  }
  __syncthreads();
  return s_fail == 0;
}

}  // namespace
}  // namespace peerlink::stream
