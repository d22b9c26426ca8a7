// CUDA driver entry points used by the shim (runtime_gpu.cpp only): resolved through the runtime
// (cudaGetDriverEntryPointByVersion) so the library never links libcuda directly and loads on
// machines without a driver (CI). Also the per-device primary contexts behind DeviceGuard.
#pragma once
#if !defined(PEERLINK_HIP)
#include <atomic>
#include <mutex>

#include "common/format.h"
#include "common/log.h"
#include "gpu/gpu_api.h"
#include "gpu/gpu_error.h"
#include "peerlink/errors.h"

namespace peerlink::gpu::driver {

template <typename Fn>
Fn resolve(const char* sym) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  rt::check(cudaGetDriverEntryPointByVersion(sym, &fn, 12000, cudaEnableDefault, &q),
            "cudaGetDriverEntryPointByVersion");
  if (q != cudaDriverEntryPointSuccess || !fn)
    throw GpuError(
        common::format("CUDA driver entry point {} not available (query result {})", sym, static_cast<int>(q)),
        static_cast<int>(q), "cudaGetDriverEntryPointByVersion");
  return reinterpret_cast<Fn>(fn);
}

// Resolved once; the hot paths call plain function pointers.
struct Api {
  CUresult (*get_error_string)(CUresult, const char**);
  CUresult (*ctx_get_current)(CUcontext*);
  CUresult (*ctx_set_current)(CUcontext);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*primary_retain)(CUcontext*, CUdevice);
  CUresult (*primary_state)(CUdevice, unsigned*, int*);
  CUresult (*get_range)(CUdeviceptr*, size_t*, CUdeviceptr);
  CUresult (*ptr_attr)(void*, CUpointer_attribute, CUdeviceptr);
  CUresult (*write_value64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
  // Virtual memory management (vmm.cpp): export/import of VMM chunks by file descriptor.
  CUresult (*mem_retain)(CUmemGenericAllocationHandle*, void*);
  CUresult (*mem_release)(CUmemGenericAllocationHandle);
  CUresult (*mem_export)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long);
  CUresult (*mem_import)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType);
  CUresult (*mem_props)(CUmemAllocationProp*, CUmemGenericAllocationHandle);
  CUresult (*mem_reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*mem_free_va)(CUdeviceptr, size_t);
  CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*mem_unmap)(CUdeviceptr, size_t);
  CUresult (*mem_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
  CUresult (*mem_create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
  CUresult (*mem_granularity)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags);
  Api() {
    load(get_error_string, "cuGetErrorString");
    load(ctx_get_current, "cuCtxGetCurrent");
    load(ctx_set_current, "cuCtxSetCurrent");
    load(device_get, "cuDeviceGet");
    load(primary_retain, "cuDevicePrimaryCtxRetain");
    load(primary_state, "cuDevicePrimaryCtxGetState");
    load(get_range, "cuMemGetAddressRange");
    load(ptr_attr, "cuPointerGetAttribute");
    load(write_value64, "cuStreamWriteValue64");
    load(mem_retain, "cuMemRetainAllocationHandle");
    load(mem_release, "cuMemRelease");
    load(mem_export, "cuMemExportToShareableHandle");
    load(mem_import, "cuMemImportFromShareableHandle");
    load(mem_props, "cuMemGetAllocationPropertiesFromHandle");
    load(mem_reserve, "cuMemAddressReserve");
    load(mem_free_va, "cuMemAddressFree");
    load(mem_map, "cuMemMap");
    load(mem_unmap, "cuMemUnmap");
    load(mem_set_access, "cuMemSetAccess");
    load(mem_create, "cuMemCreate");
    load(mem_granularity, "cuMemGetAllocationGranularity");
  }
  template <typename Fn>
  static void load(Fn& f, const char* sym) {
    f = resolve<Fn>(sym);
  }
};
inline const Api& api() {
  static const Api a;
  return a;
}

// GpuError for a failed driver call (CUresult codes are not cudaError_t codes).
[[noreturn]] inline void throw_error(CUresult r, const char* call) {
  const char* text = nullptr;
  if (api().get_error_string(r, &text) != CUDA_SUCCESS) text = nullptr;
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) dev = -1;
  throw make_gpu_error(call, static_cast<int>(r), nullptr, text, dev);
}
inline void check(CUresult r, const char* call) {
  if (r != CUDA_SUCCESS) throw_error(r, call);
}

// The primary context of every device, retained once per process (the runtime uses the same
// context; it lives until the process exits). Not a cache of any thread's current device: it maps
// a device to a handle that does not change.
constexpr int kMaxDevices = 256;
inline std::atomic<CUcontext> g_primary[kMaxDevices];
inline CUcontext primary_context(int dev) {
  if (dev < 0 || dev >= kMaxDevices)
    throw InvalidArgument(common::format("device {} is outside [0, {})", dev, kMaxDevices));
  CUcontext c = g_primary[dev].load(std::memory_order_acquire);
  if (c) return c;
  static std::mutex mu;
  std::lock_guard<std::mutex> g(mu);
  c = g_primary[dev].load(std::memory_order_relaxed);
  if (c) return c;
  int n = 0;
  rt::check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");  // initializes the runtime and the driver
  if (dev >= n) throw InvalidArgument(common::format("device {} does not exist (cuda sees {} device(s))", dev, n));
  CUdevice d = 0;
  check(api().device_get(&d, dev), "cuDeviceGet");
  check(api().primary_retain(&c, d), "cuDevicePrimaryCtxRetain");
  g_primary[dev].store(c, std::memory_order_release);
  return c;
}

}  // namespace peerlink::gpu::driver
#endif
