// Element math of the fused allreduce + residual add + RMSNorm (peerlink/fused.h), shared by the
// host backend (g++) and the kernels (nvcc / hipcc) so that both follow one formula: f32 math, one
// rounding per output, the norm on the rounded residual. Every operation here is an IEEE f32 add,
// multiply, division or square root (no fast-math approximations, no fused multiply-add across a
// rounding the contract names), so results depend only on the order of the row's sum of squares,
// which every rank of one communicator computes alike.
#pragma once
#include <math.h>

#include <cstddef>
#include <cstdint>

#include "collectives/reduce_ops.h"

namespace peerlink::coll {

// residual_out element: the f32 sum over ranks plus the residual, rounded once to T.
template <typename T>
PL_HD T fused_residual(float sum, T residual) {
  return Acc<T>::out(sum + Acc<T>::in(residual));
}

// 1 / sqrt(mean of squares + eps) of a row whose squares sum to `sumsq` (IEEE division and root).
PL_HD float fused_inv_rms(float sumsq, size_t hidden, float eps) {
  return 1.0f / sqrtf(sumsq / static_cast<float>(hidden) + eps);
}

// norm_out element: (x * inv) * (weight_bias + w), rounded once to T.
template <typename T>
PL_HD T fused_norm(T x, T w, float inv, float weight_bias) {
  return Acc<T>::out((Acc<T>::in(x) * inv) * (weight_bias + Acc<T>::in(w)));
}

// f32 -> OCP FP8 E4M3 ("fn": bias 7, no infinities, 0x7f / 0xff NaN, largest finite 448), rounded to
// nearest even, finite values beyond 448 and infinities saturated to +-448 (what vLLM's and
// TensorRT-LLM's static FP8 quantization do), NaN kept as NaN.
PL_HD uint8_t f32_to_e4m3(float x) {
  const uint32_t u = bit_cast_<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448: saturate
  if (a >= 0x3c800000u) {  // >= 2^-6: a normal E4M3 number (exponent field 1..15)
    // Round the 23 mantissa bits to 3, to nearest even; a carry moves into the exponent. Then the
    // exponent is rebiased from 127 to 7 (the field is the f32 exponent - 120).
    const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
    return static_cast<uint8_t>(sign | ((r >> 20) - (120u << 3)));
  }
  // Subnormal E4M3: multiples of 2^-9 below 2^-6. a * 512 < 8 is exact; round it to an integer
  // (nearest even). 8 is the encoding of 2^-6, the smallest normal number, as it must be.
  const float y = bit_cast_<float>(a) * 512.0f;
  uint32_t i = static_cast<uint32_t>(y);
  const float frac = y - static_cast<float>(i);
  if (frac > 0.5f || (frac == 0.5f && (i & 1u))) ++i;
  return static_cast<uint8_t>(sign | i);
}

// quant_out element: e4m3 of the rounded norm divided by the per-tensor scale (IEEE division).
template <typename T>
PL_HD uint8_t fused_quant(T norm, float scale) {
  return f32_to_e4m3(Acc<T>::in(norm) / scale);
}

}  // namespace peerlink::coll
