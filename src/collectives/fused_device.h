// Device side of the fused allreduce + residual add + RMSNorm (fused_plan.h), shared by its kernels
// (fused_ll_kernels.cu, fused_kernels.cu). Included by .cu files only.
//
// A thread keeps its part of a row as 16-byte packs of two 8-byte words (Pack16 lo, hi) per slot:
// the input, then, after the reduction in rank order and the residual add, the rounded residual_out;
// and the weight. A path says which row elements word h of slot k holds through a `word_at(k, h)`
// callable (element index, or kNoWord). finish_row() turns the residual_out words into every output.
#pragma once
#include "collectives/device_compat.h"
#include "collectives/device_reduce.h"
#include "collectives/device_sync.h"
#include "collectives/fused_math.h"
#include "collectives/fused_plan.h"
#include "collectives/reduce_ops.h"

namespace peerlink::coll::fused {

constexpr size_t kNoWord = ~size_t(0);

template <typename T>
struct WordOf {
  static constexpr int E = 8 / int(sizeof(T));   // elements per 8-byte word
  static constexpr int V = 16 / int(sizeof(T));  // elements per 16-byte unit
};

// The caller's memory (input, residual, weight): plain loads, cacheable.
__device__ __forceinline__ Pack16 load16(const void* p) { return *static_cast<const Pack16*>(p); }
__device__ __forceinline__ uint64_t half_of(const Pack16& p, int h) { return h ? p.hi : p.lo; }

// acc[e] = (first ? 0 : acc[e]) + element e of word v, in f32.
template <typename T>
__device__ __forceinline__ void fold(float (&acc)[WordOf<T>::E], uint64_t v, bool first) {
  T x[WordOf<T>::E];
  memcpy(x, &v, 8);
#pragma unroll
  for (int e = 0; e < WordOf<T>::E; ++e) acc[e] = first ? Acc<T>::in(x[e]) : acc[e] + Acc<T>::in(x[e]);
}

// The residual_out word: the ranks' sum plus the residual word, rounded once (fused_math.h).
template <typename T>
__device__ __forceinline__ uint64_t residual_word(const float (&acc)[WordOf<T>::E], uint64_t residual) {
  T r[WordOf<T>::E];
  memcpy(r, &residual, 8);
#pragma unroll
  for (int e = 0; e < WordOf<T>::E; ++e) r[e] = fused_residual<T>(acc[e], r[e]);
  uint64_t v;
  memcpy(&v, r, 8);
  return v;
}

template <typename T>
__device__ __forceinline__ float add_squares(float ss, uint64_t v) {
  T x[WordOf<T>::E];
  memcpy(x, &v, 8);
#pragma unroll
  for (int e = 0; e < WordOf<T>::E; ++e) {
    const float q = Acc<T>::in(x[e]);
    ss += q * q;
  }
  return ss;
}

template <typename T>
__device__ __forceinline__ uint64_t norm_word(uint64_t ro, uint64_t w, float inv, float weight_bias) {
  T x[WordOf<T>::E], y[WordOf<T>::E];
  memcpy(x, &ro, 8);
  memcpy(y, &w, 8);
#pragma unroll
  for (int e = 0; e < WordOf<T>::E; ++e) x[e] = fused_norm<T>(x[e], y[e], inv, weight_bias);
  uint64_t v;
  memcpy(&v, x, 8);
  return v;
}

// The word's E e4m3 bytes at q (q is E-byte aligned: rows are hidden bytes, words E elements).
template <typename T>
__device__ __forceinline__ void store_quant(uint8_t* q, uint64_t norm, float scale) {
  constexpr int E = WordOf<T>::E;
  T x[E];
  memcpy(x, &norm, 8);
  uint8_t b[E];
#pragma unroll
  for (int e = 0; e < E; ++e) b[e] = fused_quant<T>(x[e], scale);
  typename UintOf<E>::type u;
  memcpy(&u, b, E);
  *reinterpret_cast<typename UintOf<E>::type*>(q) = u;
}

// The sum of v over the block (every thread gets the same bits: a butterfly within each warp, then
// the warps' sums in warp order) and whether any thread passed failed. Every thread must call it.
__device__ __forceinline__ float block_sum(float v, bool failed, bool& any_failed) {
  constexpr int kMaxWarps = kFusedThreadsMax / 32;
  __shared__ float s_part[kMaxWarps];
  __shared__ int s_fail[kMaxWarps];
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += gpu::dev::shfl_xor(v, o);
  const bool warp_failed = gpu::dev::warp_any(failed);
  const int warp = int(threadIdx.x) / kWarpSize, warps = int(blockDim.x) / kWarpSize;
  __syncthreads();  // the previous row's readers are done with s_part
  if (int(threadIdx.x) % kWarpSize == 0) {
    s_part[warp] = v;
    s_fail[warp] = warp_failed ? 1 : 0;
  }
  __syncthreads();
  float t = 0.f;
  int f = 0;
  for (int w = 0; w < warps; ++w) {
    t += s_part[w];
    f |= s_fail[w];
  }
  any_failed = f != 0;
  return t;
}

// Row `row`'s outputs from the thread's residual_out words `ro` and weight words `wt`: the row's
// sum of squares (block-wide), then residual_out, norm_out (when not null) and quant_out (Quant)
// stored from registers. False (on every thread) when a thread of the block passed failed: nothing
// is stored then. Every thread of the block must call it.
template <typename T, bool Quant, typename WordAt>
__device__ __forceinline__ bool finish_row(const FusedArgs& f, size_t row, const Pack16 (&ro)[kFusedSlots],
                                           const Pack16 (&wt)[kFusedSlots], float scale, bool failed,
                                           WordAt&& word_at) {
  constexpr int E = WordOf<T>::E, V = WordOf<T>::V;
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kFusedSlots; ++k)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (word_at(k, h) != kNoWord) ss = add_squares<T>(ss, half_of(ro[k], h));
  bool any_failed = false;
  const float total = block_sum(ss, failed, any_failed);
  if (any_failed) return false;
  const float inv = fused_inv_rms(total, f.hidden, f.eps);
  T* rout = static_cast<T*>(f.residual_out) + row * f.hidden;
  T* nout = f.norm_out ? static_cast<T*>(f.norm_out) + row * f.hidden : nullptr;
  uint8_t* qout = Quant ? static_cast<uint8_t*>(f.quant_out) + row * f.hidden : nullptr;
#pragma unroll
  for (int k = 0; k < kFusedSlots; ++k) {
    const size_t e0 = word_at(k, 0), e1 = word_at(k, 1);
    const uint64_t n0 = e0 != kNoWord ? norm_word<T>(ro[k].lo, wt[k].lo, inv, f.weight_bias) : 0;
    const uint64_t n1 = e1 != kNoWord ? norm_word<T>(ro[k].hi, wt[k].hi, inv, f.weight_bias) : 0;
    if (e0 != kNoWord && e1 == e0 + E && e0 % V == 0) {  // a whole 16-byte unit: one store per output
      *reinterpret_cast<Pack16*>(rout + e0) = ro[k];
      if (nout) *reinterpret_cast<Pack16*>(nout + e0) = Pack16{n0, n1};
    } else {
      if (e0 != kNoWord) {
        *reinterpret_cast<uint64_t*>(rout + e0) = ro[k].lo;
        if (nout) *reinterpret_cast<uint64_t*>(nout + e0) = n0;
      }
      if (e1 != kNoWord) {
        *reinterpret_cast<uint64_t*>(rout + e1) = ro[k].hi;
        if (nout) *reinterpret_cast<uint64_t*>(nout + e1) = n1;
      }
    }
    if (Quant) {
      if (e0 != kNoWord) store_quant<T>(qout + e0, n0, scale);
      if (e1 != kNoWord) store_quant<T>(qout + e1, n1, scale);
    }
  }
  return true;
}

// One thread's bounded wait for the LL line at `line` (both halves carrying `flag`), a line rank
// `peer` writes; its 8 data bytes in v. False when this rank's abort word is set (another block
// gave up) or the wait ran out (recorded for `peer`). As the allreduce's LL kernel waits.
__device__ __forceinline__ bool take_ll(const LaunchArgs& a, const char* line, uint32_t flag, int peer, uint64_t& v) {
  uint32_t d0, f0, d1, f1;
  load_ll(line, d0, f0, d1, f1);
  if (f0 != flag || f1 != flag) {
    const uint64_t t0 = now_ns();
    for (uint32_t spins = 1;; ++spins) {
      load_ll(line, d0, f0, d1, f1);
      if (f0 == flag && f1 == flag) break;
      if ((spins & 1023) == 0) {
        if (*reinterpret_cast<volatile uint32_t*>(&a.flags[a.rank]->abort)) return false;
        if (now_ns() - t0 > a.timeout_ns) {
          report_timeout(a, peer);
          return false;
        }
      }
    }
  }
  v = (uint64_t(d1) << 32) | d0;
  return true;
}

// The kernel launchers of each file (the typed instantiations live with their kernels).
void launch_fused_ll(const FusedArgs& f, DevStream st);
void launch_fused_ll128(const FusedArgs& f, DevStream st);

// The three element types of the fused call; false for another dtype code.
template <typename F>
inline bool with_fused_type(int code, F&& fn) {
  switch (code) {
    case kF32: fn(float{}); return true;
    case kF16: fn(f16_t{}); return true;
    case kBF16: fn(bf16_t{}); return true;
  }
  return false;
}

template <typename Kernel>
void launch_fused_kernel(Kernel kernel, const FusedArgs& f, DevStream st) {
  gpu::dev::launch(kernel, static_cast<unsigned>(f.a.blocks), static_cast<unsigned>(f.a.threads), st, f.a.pdl, f);
}

}  // namespace peerlink::coll::fused
