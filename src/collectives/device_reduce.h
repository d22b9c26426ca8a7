// Device element loops shared by the allreduce kernels and the other collectives' kernels
// (coll_kernels.cu): a block-wide move/reduce over 16-byte packs and the 8-byte word accessors of
// the LL paths. Included by .cu files only.
#pragma once
#include "collectives/device_compat.h"
#include "collectives/reduce_ops.h"

namespace peerlink::coll {

template <typename T>
struct Elems {
  static constexpr int kVec = 16 / sizeof(T);
};

// outs[o][i] = reduce(ins[0][i], ..., ins[nin-1][i]) for i < n, by the threads of one block.
// ins[0] may be the caller's buffer; the others are scratch rewritten by peers (fresh loads).
// With nin == 1 the bytes move unchanged (no conversion, NaN payloads kept).
template <typename T, int Op>
__device__ void reduce_block(const T* const* ins, int nin, T* const* outs, int nout, size_t n) {
  using A = Acc<T>;
  using AccT = typename A::type;
  constexpr int V = Elems<T>::kVec;
  bool aligned = true;
  for (int i = 0; i < nin; ++i) aligned &= (reinterpret_cast<uintptr_t>(ins[i]) & 15) == 0;
  for (int o = 0; o < nout; ++o) aligned &= (reinterpret_cast<uintptr_t>(outs[o]) & 15) == 0;
  size_t nvec = aligned ? n / V : 0;
  for (size_t u = threadIdx.x; u < nvec; u += blockDim.x) {
    Pack16 p = load_fresh(reinterpret_cast<const Pack16*>(ins[0]) + u);
    if (nin > 1) {
      T v[V];
      AccT acc[V];
      memcpy(v, &p, 16);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] = A::in(v[j]);
      for (int r = 1; r < nin; ++r) {
        Pack16 q = load_fresh(reinterpret_cast<const Pack16*>(ins[r]) + u);
        memcpy(v, &q, 16);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = Apply<Op>::run(acc[j], A::in(v[j]));
      }
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = A::out(finish<Op>(acc[j], nin));
      memcpy(&p, v, 16);
    }
    for (int o = 0; o < nout; ++o) reinterpret_cast<Pack16*>(outs[o])[u] = p;
  }
  for (size_t e = nvec * V + threadIdx.x; e < n; e += blockDim.x) {
    T x = load_fresh_scalar(ins[0] + e);
    if (nin > 1) {
      AccT acc = A::in(x);
      for (int r = 1; r < nin; ++r) acc = Apply<Op>::run(acc, A::in(load_fresh_scalar(ins[r] + e)));
      x = A::out(finish<Op>(acc, nin));
    }
    for (int o = 0; o < nout; ++o) outs[o][e] = x;
  }
}

// 8 data bytes of word w (zero-padded past the end; byte loads when misaligned).
// A partial or misaligned word goes byte by byte, unrolled and predicated: all eight loads are
// issued before any is used, so the word costs one memory latency instead of one per byte (a loop
// that stopped at the end waited for each byte before loading the next).
__device__ __forceinline__ uint64_t load_word(const char* p, size_t w, size_t bytes, bool aligned) {
  size_t off = w * 8;
  if (aligned && off + 8 <= bytes) return *reinterpret_cast<const uint64_t*>(p + off);
  if (aligned && off + 4 == bytes) return *reinterpret_cast<const uint32_t*>(p + off);  // 4-byte tail: one load
  unsigned char b[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) b[i] = off + i < bytes ? static_cast<unsigned char>(p[off + i]) : 0;
  uint64_t v = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) v |= uint64_t(b[i]) << (8 * i);
  return v;
}
__device__ __forceinline__ void store_word(char* p, size_t w, size_t bytes, bool aligned, uint64_t v) {
  size_t off = w * 8;
  if (aligned && off + 8 <= bytes) {
    *reinterpret_cast<uint64_t*>(p + off) = v;
    return;
  }
  if (aligned && off + 4 == bytes) {
    *reinterpret_cast<uint32_t*>(p + off) = uint32_t(v);
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (off + i < bytes) p[off + i] = static_cast<char>(v >> (8 * i));
}

}  // namespace peerlink::coll
