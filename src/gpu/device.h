// The shim's device side, for .cu files only (nvcc or hipcc): the few device operations whose
// spelling differs between CUDA and HIP — system-scope fences and release stores, L1-bypassing
// and 16-byte volatile loads/stores, a nanosecond clock, programmatic dependent launch — and a
// kernel launch that adds the PDL attribute where the runtime has one. Kernels include this and
// name no CUDA or HIP intrinsic themselves.
#pragma once
#include <cstdint>

#include "gpu/gpu_api.h"

namespace peerlink::gpu::dev {

constexpr int kWarpSize = rt::kWarpSize;

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

// Orders this thread's earlier stores before its later ones for every observer in the system
// (peers over NVLink/xGMI, the host through mapped memory).
__device__ __forceinline__ void fence_system() { __threadfence_system(); }

// After a relaxed spin saw a peer's flag: orders the later reads of the peer's data after it.
__device__ __forceinline__ void fence_acq_rel_system() {
#if defined(PEERLINK_HIP)
  __threadfence_system();
#else
  asm volatile("fence.acq_rel.sys;" ::: "memory");
#endif
}

// System-scope release store of v at p: every store this thread made before (and, through a
// preceding __syncthreads, its block's) is visible to whoever sees v.
__device__ __forceinline__ void store_release_system(uint64_t* p, uint64_t v) {
#if defined(PEERLINK_HIP)
  __threadfence_system();
  *reinterpret_cast<volatile uint64_t*>(p) = v;
#else
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#endif
}

// 16-byte load that bypasses L1 (L2 is coherent with the peers' NVLink/xGMI stores).
__device__ __forceinline__ void load_l2_16(const void* p, uint64_t& lo, uint64_t& hi) {
#if defined(PEERLINK_HIP)
  const volatile uint64_t* v = static_cast<const volatile uint64_t*>(p);
  lo = v[0];
  hi = v[1];
#else
  ulonglong2 x = __ldcg(static_cast<const ulonglong2*>(p));
  lo = x.x;
  hi = x.y;
#endif
}

// Volatile 16-byte store / load of four 32-bit words {x, y, z, w} in memory order. CUDA moves them
// as one 16-byte access; HIP as two 8-byte accesses {x, y} and {z, w}. Either way each 8-byte half
// is written and read as a unit (what the LL protocol of the collectives relies on).
__device__ __forceinline__ void store_volatile_16(void* p, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
#if defined(PEERLINK_HIP)
  volatile uint64_t* v = static_cast<volatile uint64_t*>(p);
  v[0] = (uint64_t(y) << 32) | x;
  v[1] = (uint64_t(w) << 32) | z;
#else
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(x), "r"(y), "r"(z), "r"(w)
               : "memory");
#endif
}
__device__ __forceinline__ void load_volatile_16(const void* p, uint32_t& x, uint32_t& y, uint32_t& z, uint32_t& w) {
#if defined(PEERLINK_HIP)
  const volatile uint64_t* v = static_cast<const volatile uint64_t*>(p);
  uint64_t a = v[0], b = v[1];
  x = uint32_t(a);
  y = uint32_t(a >> 32);
  z = uint32_t(b);
  w = uint32_t(b >> 32);
#else
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "l"(p) : "memory");
#endif
}

// True on every lane of the warp when `p` holds on any of its lanes (all lanes must take part).
__device__ __forceinline__ bool warp_any(bool p) {
#if defined(PEERLINK_HIP)
  return __any(p) != 0;
#else
  return __any_sync(0xffffffffu, p) != 0;
#endif
}

// The value of `v` on lane (this lane ^ mask) of the warp (all lanes must take part).
__device__ __forceinline__ float shfl_xor(float v, int mask) {
#if defined(PEERLINK_HIP)
  return __shfl_xor(v, mask);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask);
#endif
}

// Programmatic dependent launch (Hopper and later, CUDA only). A kernel launched with the PDL
// attribute may be scheduled while the previous kernel on its stream still runs; pdl_wait() blocks
// until that kernel has completed and its memory is visible. pdl_launch_dependents() lets the next
// kernel on the stream be scheduled early (it still waits in its own pdl_wait()). Both are no-ops
// without the attribute, before sm_90 and on HIP.
__device__ __forceinline__ void pdl_wait() {
#if !defined(PEERLINK_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if !defined(PEERLINK_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launches kernel<<<grid, block, 0, stream>>>(args...), with the programmatic-stream-serialization
// attribute when `pdl` is set (CUDA; HIP has none and launches plainly). A PDL launch reports its
// error at once (GpuError naming cudaLaunchKernelEx); a plain launch's error is read by the
// caller's one check_launch() after all of its launches (one GetLastError per call, not per kernel).
template <typename... Params, typename... Args>
inline void launch(void (*kernel)(Params...), unsigned grid, unsigned block, rt::Stream stream, bool pdl,
                   Args&&... args) {
#if !defined(PEERLINK_HIP)
  if (pdl) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    rt::check(cudaLaunchKernelEx(&cfg, kernel, static_cast<Args&&>(args)...), "cudaLaunchKernelEx");
    return;
  }
#else
  (void)pdl;
#endif
  kernel<<<grid, block, 0, stream>>>(static_cast<Args&&>(args)...);
}

// Loads `kernel` into the current device's context now (CUDA; HIP loads its code objects whole).
// Under lazy loading (the default from CUDA 12.2) a kernel's first launch may synchronize the
// context. A collective that launches several kernels per call (an entry step that waits for the
// peers, then copies, then an exit step) would then wait for its own entry step, which waits for
// the peers' calls that the same host thread issues next (nccl-tests -g 2: one thread, several
// devices): 2x H200, broadcast_perf -g 2 -R 2 -b 2M, the first zero-copy call timed out.
// Loading such kernels when the communicator is set up takes that sync out of the calls.
template <typename... Params>
inline void preload(void (*kernel)(Params...)) {
#if !defined(PEERLINK_HIP)
  cudaFuncAttributes attr;
  rt::check(cudaFuncGetAttributes(&attr, kernel), "cudaFuncGetAttributes");
#else
  (void)kernel;
#endif
}

// Throws GpuError when a preceding <<<>>> launch on this thread failed; `what` names the launch
// ("allreduce kernel launch") and becomes the GpuError's call.
inline void check_launch(const char* what) { rt::check(rt::GetLastError(), what); }

}  // namespace peerlink::gpu::dev
