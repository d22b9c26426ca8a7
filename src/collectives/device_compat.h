// Device helpers of the allreduce kernels, built on the GPU shim's device header (gpu/device.h):
// 16-byte packs, loads that must not be served from a stale L1 line (scratch that peers rewrite
// between steps of one kernel) and LL lines. No CUDA or HIP name appears here; the differences
// between the two live in src/gpu/.
#pragma once
#include <cstdint>

#include "gpu/device.h"

namespace peerlink::coll {

using DevStream = gpu::rt::Stream;
constexpr int kWarpSize = gpu::dev::kWarpSize;
using gpu::dev::now_ns;

struct alignas(16) Pack16 {
  uint64_t lo, hi;
};

// 16-byte load that bypasses L1 (L2 is coherent with the peers' NVLink/xGMI stores).
__device__ __forceinline__ Pack16 load_fresh(const Pack16* p) {
  Pack16 r;
  gpu::dev::load_l2_16(p, r.lo, r.hi);
  return r;
}

// One LL line (16 bytes): two 8-byte halves {data, flag}, each written and read as a unit, so a
// reader that sees both flags equal to the expected one has both data words of that step.
__device__ __forceinline__ void store_ll(void* p, uint32_t d0, uint32_t d1, uint32_t flag) {
  gpu::dev::store_volatile_16(p, d0, flag, d1, flag);
}
__device__ __forceinline__ void load_ll(const void* p, uint32_t& d0, uint32_t& f0, uint32_t& d1, uint32_t& f1) {
  gpu::dev::load_volatile_16(p, d0, f0, d1, f1);
}

template <int Bytes> struct UintOf;
template <> struct UintOf<1> { using type = uint8_t; };
template <> struct UintOf<2> { using type = uint16_t; };
template <> struct UintOf<4> { using type = uint32_t; };
template <> struct UintOf<8> { using type = uint64_t; };

template <typename T>
__device__ __forceinline__ T load_fresh_scalar(const T* p) {
  using U = typename UintOf<sizeof(T)>::type;
  U u = *reinterpret_cast<const volatile U*>(p);
  T t;
  memcpy(&t, &u, sizeof t);
  return t;
}

}  // namespace peerlink::coll
