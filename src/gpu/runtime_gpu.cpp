// The CUDA/HIP implementation of the shim (runtime.h) on the name mapping of gpu_api.h. Every
// failing runtime call throws GpuError through rt::check (message: call, error string, device).
#include <cstring>
#include <string>

#include "common/format.h"
#include "common/log.h"
#include "gpu/gpu_api.h"
#include "gpu/gpu_error.h"
#include "gpu/runtime.h"
#include "gpu/runtime_driver.h"
#include "peerlink/errors.h"

static_assert(sizeof(peerlink::gpu::rt::IpcMemHandle) == peerlink::gpu::kIpcHandleBytes, "IPC handle size");

// CALL(Malloc, &p, n): rt::Malloc(&p, n), throwing GpuError named "cudaMalloc" / "hipMalloc" on
// failure. Local to this file (#undef'd at its end).
#define CALL(fn, ...) rt::check(rt::fn(__VA_ARGS__), rt::fn##_name)

namespace peerlink::gpu {

[[noreturn]] void rt::throw_error(Error e, const char* call) {
  (void)GetLastError();  // clear a non-sticky error so later calls are not poisoned
  int dev = -1;
  if (GetDevice(&dev) != kSuccess) {  // never creates a context (measured on CUDA 13)
    (void)GetLastError();
    dev = -1;
  }
  throw make_gpu_error(call, static_cast<int>(e), GetErrorName(e), GetErrorString(e), dev);
}

const char* runtime_name() { return rt::kRuntimeName; }
bool compiled_with_gpu() { return true; }

int device_count() {
  int n = 0;
  if (rt::GetDeviceCount(&n) != rt::kSuccess) {
    (void)rt::GetLastError();
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
  CALL(DeviceGetAttribute, &major, rt::kAttrComputeCapabilityMajor, dev);
  CALL(DeviceGetAttribute, &minor, rt::kAttrComputeCapabilityMinor, dev);
  return major * 10 + minor;
#endif
}

void set_device(int dev) { CALL(SetDevice, dev); }
int current_device() {
  int d = -1;
  CALL(GetDevice, &d);
  return d;
}

// When `dev` is already current this costs one cuCtxGetCurrent (CUDA, ~8 ns measured on H200 /
// CUDA 13: a thread-local read in the driver) or one hipGetDevice, and nothing is put back.
SavedDevice enter_device(int dev) {
  SavedDevice s;
  if (dev < 0) return s;
#if defined(PEERLINK_HIP)
  int cur = -1;
  CALL(GetDevice, &cur);
  if (cur == dev) return s;
  CALL(SetDevice, dev);
  s.dev = cur;
#else
  CUcontext want = driver::primary_context(dev);
  CUcontext cur = nullptr;
  driver::check(driver::api().ctx_get_current(&cur), "cuCtxGetCurrent");
  if (cur == want) return s;
  driver::check(driver::api().ctx_set_current(want), "cuCtxSetCurrent");
  s.ctx = cur;
#endif
  s.changed = true;
  return s;
}
void leave_device(const SavedDevice& saved) noexcept {
  if (!saved.changed) return;
#if defined(PEERLINK_HIP)
  if (rt::SetDevice(saved.dev) != rt::kSuccess) (void)rt::GetLastError();
#else
  (void)driver::api().ctx_set_current(static_cast<CUcontext>(saved.ctx));
#endif
}

std::string pci_bus_id(int dev) {
  char buf[64] = {0};
  CALL(DeviceGetPCIBusId, buf, static_cast<int>(sizeof buf), dev);
  return buf;
}

void enable_peer_access(int dev, int peer) {
  if (dev == peer || dev < 0 || peer < 0) return;
  SavedDevice saved = enter_device(dev);
  rt::Error e = rt::DeviceEnablePeerAccess(peer, 0u);
  leave_device(saved);
  if (e == rt::kPeerAccessAlreadyEnabled) {
    (void)rt::GetLastError();  // not sticky, but clear it so later checks are not confused
    return;
  }
  rt::check(e, rt::DeviceEnablePeerAccess_name);
}

bool can_access_peer(int dev, int peer) {
  if (dev == peer) return true;
  int ok = 0;
  CALL(DeviceCanAccessPeer, &ok, dev, peer);
  return ok != 0;
}

int p2p_link_hint(int dev, int peer) {
  if (dev == peer) return -1;
  int native_atomics = 0;
  if (rt::DeviceGetP2PAttribute(&native_atomics, rt::kP2PAttrNativeAtomicSupported, dev, peer) != rt::kSuccess) {
    (void)rt::GetLastError();
    return -1;
  }
  // Native peer atomics exist over NVLink/xGMI, not over PCIe: a usable hint without NVML.
  return native_atomics ? 1 : 0;
}

void* device_malloc(size_t bytes) {
  void* p = nullptr;
  CALL(Malloc, &p, bytes);
  return p;
}
void device_free(void* p) {
  if (p) (void)rt::Free(p);
}

bool is_device_pointer(const void* p) {
  rt::PointerAttributes a{};
  if (rt::PointerGetAttributes(&a, p) != rt::kSuccess) {
    (void)rt::GetLastError();
    return false;
  }
#if defined(PEERLINK_HIP) && HIP_VERSION_MAJOR < 6
  return a.memoryType == rt::kMemoryTypeDevice;
#else
  return a.type == rt::kMemoryTypeDevice;
#endif
}

AddressRange address_range(const void* p) {
  AddressRange r;
#if defined(PEERLINK_HIP)
  hipDeviceptr_t base = nullptr;
  size_t size = 0;
  rt::check(hipMemGetAddressRange(&base, &size, const_cast<void*>(p)), "hipMemGetAddressRange");
  r.base = base;
  r.size = size;
#else
  static_assert(sizeof(CUdeviceptr) == sizeof(void*), "pointer size");
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult e = driver::api().get_range(&base, &size, reinterpret_cast<CUdeviceptr>(p));
  if (e != CUDA_SUCCESS)
    throw InvalidArgument(
        common::format("pointer {} is not in a device allocation (cuMemGetAddressRange: {})", p, static_cast<int>(e)));
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
  CUresult e = driver::api().ptr_attr(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, reinterpret_cast<CUdeviceptr>(p));
  return e == CUDA_SUCCESS && capable != 0;
#endif
}

uint64_t buffer_id(const void* p) {
#if defined(PEERLINK_HIP)
  (void)p;
  return 0;
#else
  unsigned long long id = 0;
  CUresult e = driver::api().ptr_attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, reinterpret_cast<CUdeviceptr>(p));
  return e == CUDA_SUCCESS ? static_cast<uint64_t>(id) : 0;
#endif
}

void ipc_get_handle(void* base, unsigned char out[kIpcHandleBytes]) {
  rt::IpcMemHandle h;
  CALL(IpcGetMemHandle, &h, base);
  std::memcpy(out, &h, kIpcHandleBytes);
}

void* ipc_open(const unsigned char handle[kIpcHandleBytes]) {
  rt::IpcMemHandle h;
  std::memcpy(&h, handle, kIpcHandleBytes);
  void* p = nullptr;
  CALL(IpcOpenMemHandle, &p, h, rt::kIpcMemLazyEnablePeerAccess);
  return p;
}
void ipc_close(void* p) {
  if (p) (void)rt::IpcCloseMemHandle(p);
}

static rt::Stream rs(Stream s) { return static_cast<rt::Stream>(s); }
static rt::Event re(Event e) { return static_cast<rt::Event>(e); }

Stream stream_create() {
  rt::Stream s;
  CALL(StreamCreateWithFlags, &s, rt::kStreamNonBlocking);
  return s;
}
void stream_destroy(Stream s) {
  if (s) (void)rt::StreamDestroy(rs(s));
}
void stream_sync(Stream s) { CALL(StreamSynchronize, rs(s)); }

Event event_create() {
  rt::Event e;
  CALL(EventCreateWithFlags, &e, rt::kEventDisableTiming);
  return e;
}
Event event_create_timed() {
  rt::Event e;
  CALL(EventCreate, &e);
  return e;
}
float event_elapsed_ms(Event start, Event end) {
  float ms = 0;
  CALL(EventElapsedTime, &ms, re(start), re(end));
  return ms;
}
void event_destroy(Event e) {
  if (e) (void)rt::EventDestroy(re(e));
}
void event_record(Event e, Stream s) { CALL(EventRecord, re(e), rs(s)); }
bool event_query(Event e) {
  rt::Error r = rt::EventQuery(re(e));
  if (r == rt::kSuccess) return true;
  if (r == rt::kNotReady) return false;
  rt::throw_error(r, rt::EventQuery_name);
}
void stream_wait_event(Stream s, Event e) { CALL(StreamWaitEvent, rs(s), re(e), 0u); }
void memcpy_async(void* dst, const void* src, size_t bytes, Stream s) {
  CALL(MemcpyAsync, dst, src, bytes, rt::kMemcpyDefault, rs(s));
}
// From pageable memory cudaMemcpy may return before the DMA landed, and cudaMemset is
// asynchronous; work on non-blocking streams would not wait for either. "Synchronous" here means
// landed: both wait for the legacy default stream that carried them, and for nothing else. A device
// synchronization would also wait for every other stream's kernels, among them another
// communicator's kernel spinning on a peer that this thread's caller is about to serve (two ranks
// as threads of one process stalled that way in bench_allreduce).
void memcpy_sync(void* dst, const void* src, size_t bytes) {
  CALL(Memcpy, dst, src, bytes, rt::kMemcpyDefault);
  CALL(StreamSynchronize, rt::Stream{});
}
void memset_sync(void* dst, int value, size_t bytes) {
  CALL(Memset, dst, value, bytes);
  CALL(StreamSynchronize, rt::Stream{});
}

void host_register(void* p, size_t bytes) { CALL(HostRegister, p, bytes, rt::kHostRegisterPortableMapped); }
void host_unregister(void* p) {
  if (p) (void)rt::HostUnregister(p);
}
void* host_device_pointer(void* p) {
  void* d = nullptr;
  CALL(HostGetDevicePointer, &d, p, 0u);
  return d;
}

void stream_write_value64(Stream s, void* device_addr, uint64_t value) {
#if defined(PEERLINK_HIP)
  rt::check(hipStreamWriteValue64(rs(s), device_addr, value, 0), "hipStreamWriteValue64");
#else
  CUresult e = driver::api().write_value64(static_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(device_addr), value,
                                   CU_STREAM_WRITE_VALUE_DEFAULT);
  if (e != CUDA_SUCCESS) driver::throw_error(e, "cuStreamWriteValue64");
#endif
}

}  // namespace peerlink::gpu

// ---- benchmarks support ----
namespace peerlink::gpu {
void stream_begin_capture(Stream s) { CALL(StreamBeginCapture, rs(s), rt::kStreamCaptureModeThreadLocal); }
GraphExec stream_end_capture(Stream s) {
  rt::Graph graph = nullptr;
  rt::Error e = rt::StreamEndCapture(rs(s), &graph);
  if (e != rt::kSuccess) {
    if (graph) (void)rt::GraphDestroy(graph);
    rt::throw_error(e, rt::StreamEndCapture_name);
  }
  rt::GraphExec exec = nullptr;
  e = rt::GraphInstantiateWithFlags(&exec, graph, 0ull);
  (void)rt::GraphDestroy(graph);  // the executable graph keeps what it needs
  rt::check(e, rt::GraphInstantiateWithFlags_name);
  return exec;
}
void graph_launch(GraphExec g, Stream s) { CALL(GraphLaunch, static_cast<rt::GraphExec>(g), rs(s)); }
void graph_destroy(GraphExec g) {
  if (g) (void)rt::GraphExecDestroy(static_cast<rt::GraphExec>(g));
}
}  // namespace peerlink::gpu

// ---- collectives support ----
namespace peerlink::gpu {
bool stream_is_capturing(Stream s) {
  rt::StreamCaptureStatus st = rt::kStreamCaptureStatusNone;
  CALL(StreamIsCapturing, rs(s), &st);
  return st != rt::kStreamCaptureStatusNone;
}
uint64_t capture_id(Stream s) {
  rt::StreamCaptureStatus st = rt::kStreamCaptureStatusNone;
  unsigned long long id = 0;
  CALL(StreamGetCaptureInfo, rs(s), &st, &id);
  return st == rt::kStreamCaptureStatusActive ? static_cast<uint64_t>(id) : 0;
}
#if defined(PEERLINK_HIP)
bool capture_retain_supported() { return false; }
bool capture_retain(Stream, void (*)(void*), void*) { return false; }
#else
bool capture_retain_supported() { return true; }
bool capture_retain(Stream s, void (*release)(void*), void* arg) {
  rt::StreamCaptureStatus st = rt::kStreamCaptureStatusNone;
  unsigned long long id = 0;
  rt::Graph graph = nullptr;
  CALL(StreamGetCaptureInfo, rs(s), &st, &id, &graph);
  if (st != rt::kStreamCaptureStatusActive || !graph) return false;
  rt::UserObject obj = nullptr;
  rt::Error e = rt::UserObjectCreate(&obj, arg, release, 1u, rt::kUserObjectNoDestructorSync);
  if (e != rt::kSuccess) {
    release(arg);  // nobody else will
    rt::throw_error(e, rt::UserObjectCreate_name);
  }
  e = rt::GraphRetainUserObject(graph, obj, 1u, rt::kGraphUserObjectMove);
  if (e != rt::kSuccess) {
    (void)rt::UserObjectRelease(obj, 1u);  // our reference: dropping it runs release(arg)
    rt::throw_error(e, rt::GraphRetainUserObject_name);
  }
  return true;
}
#endif
void* host_alloc_mapped(size_t bytes) {
  void* p = nullptr;
  CALL(HostAlloc, &p, bytes, rt::kHostAllocMappedFlags);
  std::memset(p, 0, bytes);
  return p;
}
void host_free_mapped(void* p) {
  if (p) (void)rt::FreeHost(p);
}
void* device_malloc_flags(size_t bytes) {
  void* p = nullptr;
#if defined(PEERLINK_HIP)
#if defined(hipDeviceMallocUncached)
  rt::check(hipExtMallocWithFlags(&p, bytes, hipDeviceMallocUncached), "hipExtMallocWithFlags");
#else
  rt::check(hipExtMallocWithFlags(&p, bytes, hipDeviceMallocFinegrained), "hipExtMallocWithFlags");
#endif
#else
  CALL(Malloc, &p, bytes);
#endif
  return p;
}
int multiprocessor_count(int dev) {
  int n = 0;
  CALL(DeviceGetAttribute, &n, rt::kAttrMultiProcessorCount, dev);
  return n;
}
}  // namespace peerlink::gpu

// ---- tests support ----
namespace peerlink::gpu {
int pointer_device(const void* p) {
  rt::PointerAttributes a{};
  if (rt::PointerGetAttributes(&a, p) != rt::kSuccess) {
    (void)rt::GetLastError();
    return -1;
  }
  return a.device;
}
int context_active(int dev) {
#if defined(PEERLINK_HIP)
  (void)dev;
  return -1;
#else
  CUdevice d = 0;
  unsigned flags = 0;
  int active = 0;
  driver::check(driver::api().device_get(&d, dev), "cuDeviceGet");
  driver::check(driver::api().primary_state(d, &flags, &active), "cuDevicePrimaryCtxGetState");
  return active ? 1 : 0;
#endif
}
}  // namespace peerlink::gpu

#undef CALL
