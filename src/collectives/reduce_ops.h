// Element types and reduction operators shared by the host algorithms (g++) and the device kernels
// (nvcc / hipcc), so both produce the same bits: f16/bf16 widen to f32, reduce in rank order, round
// once; integers wrap (computed in unsigned arithmetic, no signed-overflow UB).
// Half conversions are written out bitwise so that no vendor half header is needed.
#pragma once
#include <type_traits>
#include <cstdint>
#include <cstring>

#include "collectives/host_device.h"

namespace peerlink::coll {

struct f16_t { uint16_t bits; };
struct bf16_t { uint16_t bits; };

template <typename To, typename From>
PL_HD To bit_cast_(const From& f) {
  static_assert(sizeof(To) == sizeof(From), "size");
  To t;
  memcpy(&t, &f, sizeof t);
  return t;
}

PL_HD float bf16_to_f32(uint16_t b) { return bit_cast_<float>(uint32_t(b) << 16); }
PL_HD uint16_t f32_to_bf16(float f) {
  uint32_t u = bit_cast_<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                          // round to nearest even
  return uint16_t(u >> 16);
}

PL_HD float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // inf / nan
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal: normalize
    int e = -1;
    do { man <<= 1; ++e; } while ((man & 0x400u) == 0);
    u = sign | (uint32_t(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  return bit_cast_<float>(u);
}

PL_HD uint16_t f32_to_f16(float f) {
  uint32_t u = bit_cast_<uint32_t>(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);          // nan
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);         // overflow (rounds to) inf
  if (a >= 0x38800000u) {                                        // normal half
    uint32_t r = a - 0x38000000u;                                // rebias exponent 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);                              // round to nearest even
    return uint16_t(sign | (r >> 13));
  }
  if (a < 0x33000000u) return sign;                              // < half of the smallest subnormal
  uint32_t exp = a >> 23;
  uint32_t man = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - exp;                                   // 14 + (113 - exp)
  uint32_t q = man >> shift;
  uint32_t rem = man & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return uint16_t(sign | q);
}

// Storage type -> accumulation type and conversions.
template <typename T> struct Acc;
template <> struct Acc<float> {
  using type = float;
  static PL_HD float in(float x) { return x; }
  static PL_HD float out(float x) { return x; }
};
template <> struct Acc<double> {
  using type = double;
  static PL_HD double in(double x) { return x; }
  static PL_HD double out(double x) { return x; }
};
template <> struct Acc<f16_t> {
  using type = float;
  static PL_HD float in(f16_t x) { return f16_to_f32(x.bits); }
  static PL_HD f16_t out(float x) { return f16_t{f32_to_f16(x)}; }
};
template <> struct Acc<bf16_t> {
  using type = float;
  static PL_HD float in(bf16_t x) { return bf16_to_f32(x.bits); }
  static PL_HD bf16_t out(float x) { return bf16_t{f32_to_bf16(x)}; }
};
template <> struct Acc<int32_t> {
  using type = int32_t;
  static PL_HD int32_t in(int32_t x) { return x; }
  static PL_HD int32_t out(int32_t x) { return x; }
};
template <> struct Acc<int64_t> {
  using type = int64_t;
  static PL_HD int64_t in(int64_t x) { return x; }
  static PL_HD int64_t out(int64_t x) { return x; }
};

template <typename A> struct Unsigned { using type = A; };
template <> struct Unsigned<int32_t> { using type = uint32_t; };
template <> struct Unsigned<int64_t> { using type = uint64_t; };

// Operators on the accumulation type. Integer sum/prod wrap modulo 2^bits. Avg reduces as Sum;
// the reduction that covers every rank's input ends with finish() (the division by the world size).
enum OpCode : int { kOpSum = 0, kOpMax = 1, kOpMin = 2, kOpProd = 3, kOpAvg = 4 };
template <int Op> struct Apply {
  template <typename A>
  static PL_HD A run(A a, A b) {
    using U = typename Unsigned<A>::type;
    if constexpr (Op == kOpSum || Op == kOpAvg) return A(U(a) + U(b));
    else if constexpr (Op == kOpProd) return A(U(a) * U(b));
    else if constexpr (Op == kOpMax) return b > a ? b : a;
    else return b < a ? b : a;
  }
};

// The last step of a reduction over all n ranks' inputs (n = the reduction's input count; every
// kernel and host loop reduces all ranks at once). Identity but for Avg: a float sum is multiplied
// by 1/n (in the accumulation type, so f16/bf16 round once after it; exact for a power-of-two n, as
// a division would be, and within an ulp of it otherwise: a true division per element made a bf16
// reduce_scatter of 2 MB 40 % slower on the one-GPU stand-in); an integer
// divides its wrapped sum, rounding toward zero, as NCCL's ncclAvg does for signed types (on the
// magnitude: no overflow at the minimum).
template <int Op, typename A>
PL_HD A finish(A acc, int n) {
  if constexpr (Op != kOpAvg) {
    (void)n;
    return acc;
  } else if constexpr (std::is_floating_point_v<A>) {
    return acc * (A(1) / A(n));
  } else {
    using U = typename Unsigned<A>::type;
    const bool neg = acc < 0;
    const U mag = neg ? U(0) - U(acc) : U(acc);
    const U q = mag / U(n);
    return neg ? A(U(0) - q) : A(q);
  }
}

// Type codes in the order of peerlink::DataType.
enum TypeCode : int { kF32 = 0, kF16 = 1, kBF16 = 2, kF64 = 3, kI32 = 4, kI64 = 5 };

// Calls f(T{}) with the storage type of `code`; returns false for an unknown code.
template <typename F>
inline bool with_type(int code, F&& f) {
  switch (code) {
    case kF32: f(float{}); return true;
    case kF16: f(f16_t{}); return true;
    case kBF16: f(bf16_t{}); return true;
    case kF64: f(double{}); return true;
    case kI32: f(int32_t{}); return true;
    case kI64: f(int64_t{}); return true;
  }
  return false;
}

// Calls f(std::integral_constant<int, Op>{}) for the op code `code`; returns false for an unknown
// code.
template <typename F>
inline bool with_op(int code, F&& f) {
  switch (code) {
    case kOpSum: f(std::integral_constant<int, kOpSum>{}); return true;
    case kOpMax: f(std::integral_constant<int, kOpMax>{}); return true;
    case kOpMin: f(std::integral_constant<int, kOpMin>{}); return true;
    case kOpProd: f(std::integral_constant<int, kOpProd>{}); return true;
    case kOpAvg: f(std::integral_constant<int, kOpAvg>{}); return true;
  }
  return false;
}

}  // namespace peerlink::coll
