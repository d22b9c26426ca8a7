// The CUDA/HIP implementation of the shim. The runtime's name prefix is chosen here, locally, by
// the RT() macro; nothing outside this file sees CUDA or HIP names.
#include "gpu/runtime.h"

#include <cstring>
#include <string>

#include "common/log.h"
#include "peerlink/errors.h"

#if defined(PEERLINK_HIP)
#include <hip/hip_runtime.h>
#define RT(name) hip##name
using RtError = hipError_t;
using RtIpcHandle = hipIpcMemHandle_t;
#define RT_SUCCESS hipSuccess
#else
#include <cuda.h>
#include <cuda_runtime.h>
#define RT(name) cuda##name
using RtError = cudaError_t;
using RtIpcHandle = cudaIpcMemHandle_t;
#define RT_SUCCESS cudaSuccess
#endif

static_assert(sizeof(RtIpcHandle) == peerlink::gpu::kIpcHandleBytes, "IPC handle size");

namespace peerlink::gpu {
namespace {

void check(RtError e, const char* call) {
  if (e == RT_SUCCESS) return;
  (void)RT(GetLastError)();  // clear a non-sticky error so later calls are not poisoned
  throw Error(common::cat(call, " failed: ", RT(GetErrorString)(e), " (", static_cast<int>(e), ")"));
}
#define CHECK(call) check(call, #call)

#if !defined(PEERLINK_HIP)
// Driver entry points through the runtime, so the library never links libcuda directly and loads
// on machines without a driver (CI).
using GetRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
using PtrAttrFn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
template <typename Fn>
Fn driver_fn(const char* sym) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(sym, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !fn)
    throw Error(common::cat("CUDA driver entry point ", sym, " not available"));
  return reinterpret_cast<Fn>(fn);
}
#endif

}  // namespace

#if defined(PEERLINK_HIP)
const char* runtime_name() { return "hip"; }
#else
const char* runtime_name() { return "cuda"; }
#endif
bool compiled_with_gpu() { return true; }

int device_count() {
  int n = 0;
  if (RT(GetDeviceCount)(&n) != RT_SUCCESS) {
    (void)RT(GetLastError)();
    return 0;
  }
  return n;
}
int compute_capability(int dev) {
#if defined(PEERLINK_HIP)
  (void)dev;
  return 0;
#else
  int major = 0, minor = 0;
  CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return major * 10 + minor;
#endif
}

void set_device(int dev) { CHECK(RT(SetDevice)(dev)); }
int current_device() {
  int d = -1;
  CHECK(RT(GetDevice)(&d));
  return d;
}

std::string pci_bus_id(int dev) {
  char buf[64] = {0};
  CHECK(RT(DeviceGetPCIBusId)(buf, sizeof buf, dev));
  return buf;
}

bool can_access_peer(int dev, int peer) {
  if (dev == peer) return true;
  int ok = 0;
  CHECK(RT(DeviceCanAccessPeer)(&ok, dev, peer));
  return ok != 0;
}

int p2p_link_hint(int dev, int peer) {
  if (dev == peer) return -1;
  int native_atomics = 0;
#if defined(PEERLINK_HIP)
  if (hipDeviceGetP2PAttribute(&native_atomics, hipDevP2PAttrNativeAtomicSupported, dev, peer) != hipSuccess) {
#else
  if (cudaDeviceGetP2PAttribute(&native_atomics, cudaDevP2PAttrNativeAtomicSupported, dev, peer) != cudaSuccess) {
#endif
    (void)RT(GetLastError)();
    return -1;
  }
  // Native peer atomics exist over NVLink/xGMI, not over PCIe: a usable hint without NVML.
  return native_atomics ? 1 : 0;
}

void* device_malloc(size_t bytes) {
  void* p = nullptr;
  CHECK(RT(Malloc)(&p, bytes));
  return p;
}
void device_free(void* p) {
  if (p) (void)RT(Free)(p);
}

bool is_device_pointer(const void* p) {
#if defined(PEERLINK_HIP)
  hipPointerAttribute_t a{};
  if (hipPointerGetAttributes(&a, p) != hipSuccess) {
    (void)hipGetLastError();
    return false;
  }
#if HIP_VERSION_MAJOR >= 6
  return a.type == hipMemoryTypeDevice;
#else
  return a.memoryType == hipMemoryTypeDevice;
#endif
#else
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
#endif
}

AddressRange address_range(const void* p) {
  AddressRange r;
#if defined(PEERLINK_HIP)
  hipDeviceptr_t base = nullptr;
  size_t size = 0;
  CHECK(hipMemGetAddressRange(&base, &size, const_cast<void*>(p)));
  r.base = base;
  r.size = size;
#else
  static_assert(sizeof(CUdeviceptr) == sizeof(void*), "pointer size");
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult e = driver_fn<GetRangeFn>("cuMemGetAddressRange")(&base, &size, reinterpret_cast<CUdeviceptr>(p));
  if (e != CUDA_SUCCESS)
    throw InvalidArgument(common::cat("pointer ", p, " is not in a device allocation (cuMemGetAddressRange: ", static_cast<int>(e), ")"));
  r.base = reinterpret_cast<void*>(base);
  r.size = size;
#endif
  return r;
}

bool ipc_capable(const void* p) {
#if defined(PEERLINK_HIP)
  (void)p;
  return true;  // hipIpcGetMemHandle reports unsupported memory itself
#else
  int capable = 0;
  CUresult e = driver_fn<PtrAttrFn>("cuPointerGetAttribute")(
      &capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, reinterpret_cast<CUdeviceptr>(p));
  return e == CUDA_SUCCESS && capable != 0;
#endif
}

uint64_t buffer_id(const void* p) {
#if defined(PEERLINK_HIP)
  (void)p;
  return 0;
#else
  unsigned long long id = 0;
  CUresult e = driver_fn<PtrAttrFn>("cuPointerGetAttribute")(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                                             reinterpret_cast<CUdeviceptr>(p));
  return e == CUDA_SUCCESS ? static_cast<uint64_t>(id) : 0;
#endif
}

void ipc_get_handle(void* base, unsigned char out[kIpcHandleBytes]) {
  RtIpcHandle h;
  CHECK(RT(IpcGetMemHandle)(&h, base));
  std::memcpy(out, &h, kIpcHandleBytes);
}

void* ipc_open(const unsigned char handle[kIpcHandleBytes]) {
  RtIpcHandle h;
  std::memcpy(&h, handle, kIpcHandleBytes);
  void* p = nullptr;
  CHECK(RT(IpcOpenMemHandle)(&p, h, RT(IpcMemLazyEnablePeerAccess)));
  return p;
}
void ipc_close(void* p) {
  if (p) (void)RT(IpcCloseMemHandle)(p);
}

Stream stream_create() {
  RT(Stream_t) s;
  CHECK(RT(StreamCreateWithFlags)(&s, RT(StreamNonBlocking)));
  return s;
}
void stream_destroy(Stream s) {
  if (s) (void)RT(StreamDestroy)(static_cast<RT(Stream_t)>(s));
}
void stream_sync(Stream s) { CHECK(RT(StreamSynchronize)(static_cast<RT(Stream_t)>(s))); }

Event event_create() {
  RT(Event_t) e;
  CHECK(RT(EventCreateWithFlags)(&e, RT(EventDisableTiming)));
  return e;
}
Event event_create_timed() {
  RT(Event_t) e;
  CHECK(RT(EventCreate)(&e));
  return e;
}
float event_elapsed_ms(Event start, Event end) {
  float ms = 0;
  CHECK(RT(EventElapsedTime)(&ms, static_cast<RT(Event_t)>(start), static_cast<RT(Event_t)>(end)));
  return ms;
}
void event_destroy(Event e) {
  if (e) (void)RT(EventDestroy)(static_cast<RT(Event_t)>(e));
}
void event_record(Event e, Stream s) {
  CHECK(RT(EventRecord)(static_cast<RT(Event_t)>(e), static_cast<RT(Stream_t)>(s)));
}
bool event_query(Event e) {
  RtError r = RT(EventQuery)(static_cast<RT(Event_t)>(e));
  if (r == RT_SUCCESS) return true;
#if defined(PEERLINK_HIP)
  if (r == hipErrorNotReady) return false;
#else
  if (r == cudaErrorNotReady) return false;
#endif
  check(r, "EventQuery");
  return false;
}
void stream_wait_event(Stream s, Event e) {
  CHECK(RT(StreamWaitEvent)(static_cast<RT(Stream_t)>(s), static_cast<RT(Event_t)>(e), 0));
}
void memcpy_async(void* dst, const void* src, size_t bytes, Stream s) {
  CHECK(RT(MemcpyAsync)(dst, src, bytes, RT(MemcpyDefault), static_cast<RT(Stream_t)>(s)));
}
void memcpy_sync(void* dst, const void* src, size_t bytes) {
  CHECK(RT(Memcpy)(dst, src, bytes, RT(MemcpyDefault)));
  // From pageable memory cudaMemcpy may return before the DMA landed; work on non-blocking
  // streams would not wait for it. "Synchronous" here means landed.
  CHECK(RT(DeviceSynchronize)());
}
void memset_sync(void* dst, int value, size_t bytes) {
  CHECK(RT(Memset)(dst, value, bytes));
  CHECK(RT(DeviceSynchronize)());
}

void host_register(void* p, size_t bytes) {
  CHECK(RT(HostRegister)(p, bytes, RT(HostRegisterPortable) | RT(HostRegisterMapped)));
}

void* host_device_pointer(void* p) {
  void* d = nullptr;
  CHECK(RT(HostGetDevicePointer)(&d, p, 0));
  return d;
}

void stream_write_value64(Stream s, void* device_addr, uint64_t value) {
#if defined(PEERLINK_HIP)
  CHECK(hipStreamWriteValue64(static_cast<hipStream_t>(s), device_addr, value, 0));
#else
  using WriteFn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
  static WriteFn fn = driver_fn<WriteFn>("cuStreamWriteValue64");  // resolved once: a pure function pointer
  CUresult e = fn(static_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(device_addr), value,
                  CU_STREAM_WRITE_VALUE_DEFAULT);
  if (e != CUDA_SUCCESS) throw Error(common::cat("cuStreamWriteValue64 failed: ", static_cast<int>(e)));
#endif
}
void host_unregister(void* p) {
  if (p) (void)RT(HostUnregister)(p);
}

}  // namespace peerlink::gpu

// ---- benchmarks support ----
namespace peerlink::gpu {
void stream_begin_capture(Stream s) {
  CHECK(RT(StreamBeginCapture)(static_cast<RT(Stream_t)>(s), RT(StreamCaptureModeThreadLocal)));
}
GraphExec stream_end_capture(Stream s) {
  RT(Graph_t) graph = nullptr;
  RtError e = RT(StreamEndCapture)(static_cast<RT(Stream_t)>(s), &graph);
  if (e != RT_SUCCESS) {
    if (graph) (void)RT(GraphDestroy)(graph);
    check(e, "StreamEndCapture");
  }
  RT(GraphExec_t) exec = nullptr;
  e = RT(GraphInstantiateWithFlags)(&exec, graph, 0);
  (void)RT(GraphDestroy)(graph);  // the executable graph keeps what it needs
  check(e, "GraphInstantiateWithFlags");
  return exec;
}
void graph_launch(GraphExec g, Stream s) {
  CHECK(RT(GraphLaunch)(static_cast<RT(GraphExec_t)>(g), static_cast<RT(Stream_t)>(s)));
}
void graph_destroy(GraphExec g) {
  if (g) (void)RT(GraphExecDestroy)(static_cast<RT(GraphExec_t)>(g));
}
}  // namespace peerlink::gpu

// ---- collectives support ----
namespace peerlink::gpu {
bool stream_is_capturing(Stream s) {
  RT(StreamCaptureStatus) st = RT(StreamCaptureStatusNone);
  CHECK(RT(StreamIsCapturing)(static_cast<RT(Stream_t)>(s), &st));
  return st != RT(StreamCaptureStatusNone);
}
void* host_alloc_mapped(size_t bytes) {
  void* p = nullptr;
#if defined(PEERLINK_HIP)
  CHECK(hipHostMalloc(&p, bytes, hipHostMallocMapped | hipHostMallocPortable | hipHostMallocCoherent));
#else
  CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
#endif
  std::memset(p, 0, bytes);
  return p;
}
void host_free_mapped(void* p) {
#if defined(PEERLINK_HIP)
  if (p) (void)hipHostFree(p);
#else
  if (p) (void)cudaFreeHost(p);
#endif
}
void* device_malloc_flags(size_t bytes) {
  void* p = nullptr;
#if defined(PEERLINK_HIP)
#if defined(hipDeviceMallocUncached)
  CHECK(hipExtMallocWithFlags(&p, bytes, hipDeviceMallocUncached));
#else
  CHECK(hipExtMallocWithFlags(&p, bytes, hipDeviceMallocFinegrained));
#endif
#else
  CHECK(cudaMalloc(&p, bytes));
#endif
  return p;
}
int multiprocessor_count(int dev) {
  int n = 0;
#if defined(PEERLINK_HIP)
  CHECK(hipDeviceGetAttribute(&n, hipDeviceAttributeMultiprocessorCount, dev));
#else
  CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
#endif
  return n;
}
}  // namespace peerlink::gpu
