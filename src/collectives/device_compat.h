// The few places where CUDA and HIP differ for the allreduce kernels: runtime header, stream type,
// a nanosecond clock for bounded spins, and loads that must not be served from a stale L1 line
// (scratch that peers rewrite between steps of one kernel).
#pragma once
#include <cstdint>

#if defined(PEERLINK_HIP)
#include <hip/hip_runtime.h>
using DevStream = hipStream_t;
using DevError = hipError_t;
#define PL_DEV_SUCCESS hipSuccess
#define PL_DEV_GET_LAST_ERROR hipGetLastError
#define PL_DEV_ERROR_STRING hipGetErrorString
constexpr int kWarpSize = 64;  // wavefront
#else
#include <cuda_runtime.h>
using DevStream = cudaStream_t;
using DevError = cudaError_t;
#define PL_DEV_SUCCESS cudaSuccess
#define PL_DEV_GET_LAST_ERROR cudaGetLastError
#define PL_DEV_ERROR_STRING cudaGetErrorString
constexpr int kWarpSize = 32;
#endif

namespace peerlink::coll {

struct alignas(16) Pack16 {
  uint64_t lo, hi;
};

// Wall-clock nanoseconds on the device (bounded spins; comparable within one GPU only).
__device__ __forceinline__ uint64_t now_ns() {
#if defined(PEERLINK_HIP)
#if defined(__HIP_DEVICE_COMPILE__)
  return uint64_t(wall_clock64()) * 10ull;  // the constant wall clock runs at 100 MHz on CDNA
#else
  return 0;  // host pass of hipcc: never executed
#endif
#else
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}

// 16-byte load that bypasses L1 (L2 is coherent with the peers' NVLink/xGMI stores).
__device__ __forceinline__ Pack16 load_fresh(const Pack16* p) {
#if defined(PEERLINK_HIP)
  const volatile uint64_t* v = reinterpret_cast<const volatile uint64_t*>(p);
  return Pack16{v[0], v[1]};
#else
  ulonglong2 x = __ldcg(reinterpret_cast<const ulonglong2*>(p));
  return Pack16{x.x, x.y};
#endif
}

// One LL line (16 bytes): two 8-byte halves {data, flag}, each written and read as a unit, so a
// reader that sees both flags equal to the expected one has both data words of that step.
__device__ __forceinline__ void store_ll(void* p, uint32_t d0, uint32_t d1, uint32_t flag) {
#if defined(PEERLINK_HIP)
  volatile uint64_t* v = static_cast<volatile uint64_t*>(p);
  v[0] = (uint64_t(flag) << 32) | d0;
  v[1] = (uint64_t(flag) << 32) | d1;
#else
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(d0), "r"(flag), "r"(d1), "r"(flag)
               : "memory");
#endif
}
__device__ __forceinline__ void load_ll(const void* p, uint32_t& d0, uint32_t& f0, uint32_t& d1, uint32_t& f1) {
#if defined(PEERLINK_HIP)
  const volatile uint64_t* v = static_cast<const volatile uint64_t*>(p);
  uint64_t a = v[0], b = v[1];
  d0 = uint32_t(a);
  f0 = uint32_t(a >> 32);
  d1 = uint32_t(b);
  f1 = uint32_t(b >> 32);
#else
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
               : "l"(p)
               : "memory");
#endif
}

template <int Bytes> struct UintOf;
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
