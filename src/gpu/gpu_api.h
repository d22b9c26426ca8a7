// The one place where the CUDA and HIP runtimes are named. Every runtime function peerlink uses is
// mapped once, here, into namespace peerlink::gpu::rt under its runtime-neutral name (rt::Malloc is
// cudaMalloc or hipMalloc), together with the types and constants that differ between the two.
//
// Included only by the shim's own implementation (runtime_gpu.cpp) and, through gpu/device.h, by
// .cu files. Everything else reaches the GPU through gpu/runtime.h, which names no runtime type.
// The helper macros below are #undef'd at the end: no CUDA/HIP-style macro leaks to includers.
#pragma once
#if defined(PEERLINK_HOST_ONLY)
#error "gpu/gpu_api.h is for CUDA/HIP builds only (runtime_gpu.cpp and .cu files)"
#endif

#include <cstddef>
#include <cstdint>

#if defined(PEERLINK_HIP)
#include <hip/hip_runtime.h>
#define PL_RT_(name) hip##name
#define PL_RT_PREFIX_ "hip"
#else
#include <cuda.h>  // driver types: the few driver entry points runtime_gpu.cpp resolves at run time
#include <cuda_runtime.h>
#define PL_RT_(name) cuda##name
#define PL_RT_PREFIX_ "cuda"
#endif

namespace peerlink::gpu::rt {

using Error = PL_RT_(Error_t);
using Stream = PL_RT_(Stream_t);
using Event = PL_RT_(Event_t);
using Graph = PL_RT_(Graph_t);
using GraphExec = PL_RT_(GraphExec_t);
using IpcMemHandle = PL_RT_(IpcMemHandle_t);
using StreamCaptureStatus = PL_RT_(StreamCaptureStatus);

inline constexpr const char* kRuntimeName = PL_RT_PREFIX_;  // "cuda" or "hip"
inline constexpr Error kSuccess = PL_RT_(Success);
inline constexpr Error kNotReady = PL_RT_(ErrorNotReady);
inline constexpr Error kPeerAccessAlreadyEnabled = PL_RT_(ErrorPeerAccessAlreadyEnabled);
inline constexpr auto kMemcpyDefault = PL_RT_(MemcpyDefault);
inline constexpr unsigned kStreamNonBlocking = PL_RT_(StreamNonBlocking);
inline constexpr unsigned kEventDisableTiming = PL_RT_(EventDisableTiming);
inline constexpr unsigned kIpcMemLazyEnablePeerAccess = PL_RT_(IpcMemLazyEnablePeerAccess);
inline constexpr unsigned kHostRegisterPortableMapped = PL_RT_(HostRegisterPortable) | PL_RT_(HostRegisterMapped);
inline constexpr auto kStreamCaptureModeThreadLocal = PL_RT_(StreamCaptureModeThreadLocal);
inline constexpr auto kStreamCaptureStatusNone = PL_RT_(StreamCaptureStatusNone);
inline constexpr auto kStreamCaptureStatusActive = PL_RT_(StreamCaptureStatusActive);
inline constexpr auto kMemoryTypeDevice = PL_RT_(MemoryTypeDevice);
#if defined(PEERLINK_HIP)
using PointerAttributes = hipPointerAttribute_t;
inline constexpr int kWarpSize = 64;  // wavefront (CDNA)
inline constexpr auto kAttrMultiProcessorCount = hipDeviceAttributeMultiprocessorCount;
inline constexpr auto kP2PAttrNativeAtomicSupported = hipDevP2PAttrNativeAtomicSupported;
// Error words of collectives are read by the host while the device writes: coherent on HIP.
inline constexpr unsigned kHostAllocMappedFlags = hipHostMallocMapped | hipHostMallocPortable | hipHostMallocCoherent;
#else
using PointerAttributes = cudaPointerAttributes;
inline constexpr int kWarpSize = 32;
inline constexpr auto kAttrMultiProcessorCount = cudaDevAttrMultiProcessorCount;
inline constexpr auto kAttrComputeCapabilityMajor = cudaDevAttrComputeCapabilityMajor;
inline constexpr auto kAttrComputeCapabilityMinor = cudaDevAttrComputeCapabilityMinor;
inline constexpr auto kP2PAttrNativeAtomicSupported = cudaDevP2PAttrNativeAtomicSupported;
inline constexpr unsigned kHostAllocMappedFlags = cudaHostAllocMapped | cudaHostAllocPortable;
// Graph user objects (CUDA only here: the HIP this builds against has none; runtime_gpu.cpp).
using UserObject = cudaUserObject_t;
inline constexpr unsigned kUserObjectNoDestructorSync = cudaUserObjectNoDestructorSync;
inline constexpr unsigned kGraphUserObjectMove = cudaGraphUserObjectMove;
#endif

// One runtime function under its neutral name plus `<name>_name`, the runtime's own spelling for
// error messages ("cudaMalloc"). Thin forwarding templates: inlined, no cost over the direct call.
#define PL_RT_MAP_(name)                                               \
  inline constexpr const char name##_name[] = PL_RT_PREFIX_ #name;     \
  template <typename... A>                                             \
  inline Error name(A... a) {                                          \
    return PL_RT_(name)(a...);                                         \
  }
// The same where CUDA and HIP spell the function differently.
#if defined(PEERLINK_HIP)
#define PL_RT_ALIAS_(name, cuda_fn, hip_fn)                            \
  inline constexpr const char name##_name[] = #hip_fn;                 \
  template <typename... A>                                             \
  inline Error name(A... a) {                                          \
    return hip_fn(a...);                                               \
  }
#else
#define PL_RT_ALIAS_(name, cuda_fn, hip_fn)                            \
  inline constexpr const char name##_name[] = #cuda_fn;                \
  template <typename... A>                                             \
  inline Error name(A... a) {                                          \
    return cuda_fn(a...);                                              \
  }
#endif

PL_RT_MAP_(GetDeviceCount)
PL_RT_MAP_(GetDevice)
PL_RT_MAP_(SetDevice)
PL_RT_MAP_(GetLastError)
PL_RT_MAP_(DeviceGetPCIBusId)
PL_RT_MAP_(DeviceCanAccessPeer)
PL_RT_MAP_(DeviceEnablePeerAccess)
PL_RT_MAP_(DeviceGetAttribute)
PL_RT_MAP_(DeviceGetP2PAttribute)
PL_RT_MAP_(Malloc)
PL_RT_MAP_(Free)
PL_RT_MAP_(PointerGetAttributes)
PL_RT_MAP_(IpcGetMemHandle)
PL_RT_MAP_(IpcOpenMemHandle)
PL_RT_MAP_(IpcCloseMemHandle)
PL_RT_MAP_(StreamCreateWithFlags)
PL_RT_MAP_(StreamDestroy)
PL_RT_MAP_(StreamSynchronize)
PL_RT_MAP_(StreamWaitEvent)
PL_RT_MAP_(StreamIsCapturing)
PL_RT_MAP_(StreamBeginCapture)
PL_RT_MAP_(StreamEndCapture)
PL_RT_MAP_(StreamGetCaptureInfo)
#if !defined(PEERLINK_HIP)
PL_RT_MAP_(UserObjectCreate)
PL_RT_MAP_(UserObjectRelease)
PL_RT_MAP_(GraphRetainUserObject)
#endif
PL_RT_MAP_(EventCreate)
PL_RT_MAP_(EventCreateWithFlags)
PL_RT_MAP_(EventDestroy)
PL_RT_MAP_(EventRecord)
PL_RT_MAP_(EventQuery)
PL_RT_MAP_(EventElapsedTime)
PL_RT_MAP_(MemcpyAsync)
PL_RT_MAP_(Memcpy)
PL_RT_MAP_(Memset)
PL_RT_MAP_(HostRegister)
PL_RT_MAP_(HostUnregister)
PL_RT_MAP_(HostGetDevicePointer)
PL_RT_MAP_(GraphInstantiateWithFlags)
PL_RT_MAP_(GraphDestroy)
PL_RT_MAP_(GraphLaunch)
PL_RT_MAP_(GraphExecDestroy)
PL_RT_ALIAS_(HostAlloc, cudaHostAlloc, hipHostMalloc)
PL_RT_ALIAS_(FreeHost, cudaFreeHost, hipHostFree)

inline const char* GetErrorString(Error e) { return PL_RT_(GetErrorString)(e); }
inline const char* GetErrorName(Error e) { return PL_RT_(GetErrorName)(e); }

// Throws GpuError for a failed call: code, the call's name, the runtime's error string and the
// current device in the message; clears a non-sticky error first so later calls are not poisoned.
// Defined in runtime_gpu.cpp (the error path only: nothing of it is inlined into callers).
[[noreturn]] void throw_error(Error e, const char* call);
inline void check(Error e, const char* call) {
  if (e != kSuccess) throw_error(e, call);
}

}  // namespace peerlink::gpu::rt

#undef PL_RT_MAP_
#undef PL_RT_ALIAS_
#undef PL_RT_PREFIX_
#undef PL_RT_
