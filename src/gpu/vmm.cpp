// VMM export/import (vmm.h). CUDA: driver entry points resolved at run time (runtime_driver.h), no
// libcuda link. HIP: the hipMem* VMM API of the HIP runtime. Host builds: stubs.
#include "gpu/vmm.h"

#include <unistd.h>

#include <vector>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

#if defined(PEERLINK_HOST_ONLY)

namespace peerlink::gpu {
namespace {
[[noreturn]] void none(const char* what) {
  throw UnsupportedError(common::format("{}: this peerlink build has no GPU runtime (host backend only)", what));
}
}  // namespace
bool vmm_needs_fd_export(const void*) { return false; }
bool vmm_chunk_at(const void*, uint64_t*, uint64_t*, uint64_t*) { return false; }
void vmm_release(uint64_t) noexcept {}
int vmm_export_fd(uint64_t) { none("vmm_export_fd"); }
uint64_t vmm_import_fd(int) { none("vmm_import_fd"); }
void* vmm_map_chunks(int, const uint64_t*, const uint64_t*, size_t) { none("vmm_map_chunks"); }
void vmm_unmap_range(void*, size_t) noexcept {}
size_t vmm_granularity(int) { none("vmm_granularity"); }
void* vmm_test_alloc(int, size_t, int, bool) { none("vmm_test_alloc"); }
void vmm_test_free(void*, size_t) noexcept {}
RelaxedCaptureMode::RelaxedCaptureMode() {}
RelaxedCaptureMode::~RelaxedCaptureMode() {}
}  // namespace peerlink::gpu

#else
#include "gpu/gpu_api.h"
#include "gpu/gpu_error.h"
#if !defined(PEERLINK_HIP)
#include "gpu/runtime_driver.h"
#endif

namespace peerlink::gpu {
namespace {

#if defined(PEERLINK_HIP)
using Handle = hipMemGenericAllocationHandle_t;
using Prop = hipMemAllocationProp;
using AccessDesc = hipMemAccessDesc;
using Ptr = void*;
using Res = hipError_t;
constexpr Res kOk = hipSuccess;
constexpr auto kPosixFd = hipMemHandleTypePosixFileDescriptor;
constexpr const char* kApi = "hip";
Res mem_retain(Handle* h, void* p) { return hipMemRetainAllocationHandle(h, p); }
Res mem_release(Handle h) { return hipMemRelease(h); }
Res get_range(Ptr* b, size_t* s, Ptr p) { return hipMemGetAddressRange(reinterpret_cast<hipDeviceptr_t*>(b), s, p); }
Res mem_export(int* fd, Handle h) { return hipMemExportToShareableHandle(fd, h, kPosixFd, 0); }
Res mem_import(Handle* h, int fd) {
  return hipMemImportFromShareableHandle(h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)), kPosixFd);
}
Res mem_props(Prop* p, Handle h) { return hipMemGetAllocationPropertiesFromHandle(p, h); }
Res mem_reserve(Ptr* p, size_t n) { return hipMemAddressReserve(p, n, 0, nullptr, 0); }
Res mem_free_va(Ptr p, size_t n) { return hipMemAddressFree(p, n); }
Res mem_map(Ptr p, size_t n, Handle h) { return hipMemMap(p, n, 0, h, 0); }
Res mem_unmap(Ptr p, size_t n) { return hipMemUnmap(p, n); }
Res mem_set_access(Ptr p, size_t n, const AccessDesc* d) { return hipMemSetAccess(p, n, d, 1); }
Res mem_create(Handle* h, size_t n, const Prop* p) { return hipMemCreate(h, n, p, 0); }
Res mem_granularity(size_t* g, const Prop* p) { return hipMemGetAllocationGranularity(g, p, hipMemAllocationGranularityMinimum); }
[[noreturn]] void fail(Res r, const char* call) {
  (void)hipGetLastError();
  throw make_gpu_error(call, static_cast<int>(r), hipGetErrorName(r), hipGetErrorString(r), -1);
}
Prop device_prop(int dev, bool shareable) {
  Prop p{};
  p.type = hipMemAllocationTypePinned;
  p.location.type = hipMemLocationTypeDevice;
  p.location.id = dev;
  p.requestedHandleType = shareable ? kPosixFd : hipMemHandleTypeNone;
  return p;
}
bool has_fd_type(const Prop& p) { return p.requestedHandleType == kPosixFd; }
AccessDesc rw_access(int dev) {
  AccessDesc d{};
  d.location.type = hipMemLocationTypeDevice;
  d.location.id = dev;
  d.flags = hipMemAccessFlagsProtReadWrite;
  return d;
}
uint64_t to_u64(Handle h) { return reinterpret_cast<uint64_t>(h); }
Handle from_u64(uint64_t h) { return reinterpret_cast<Handle>(h); }
int exchange_capture_mode(int m) {
  hipStreamCaptureMode mode = static_cast<hipStreamCaptureMode>(m);
  if (hipThreadExchangeStreamCaptureMode(&mode) != hipSuccess) return -1;
  return static_cast<int>(mode);
}
constexpr int kRelaxed = hipStreamCaptureModeRelaxed;
#else
using Handle = CUmemGenericAllocationHandle;
using Prop = CUmemAllocationProp;
using AccessDesc = CUmemAccessDesc;
using Ptr = CUdeviceptr;
using Res = CUresult;
constexpr Res kOk = CUDA_SUCCESS;
constexpr auto kPosixFd = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
constexpr const char* kApi = "cu";
const driver::Api& A() { return driver::api(); }
Res mem_retain(Handle* h, void* p) { return A().mem_retain(h, p); }
Res mem_release(Handle h) { return A().mem_release(h); }
Res get_range(Ptr* b, size_t* s, Ptr p) { return A().get_range(b, s, p); }
Res mem_export(int* fd, Handle h) { return A().mem_export(fd, h, kPosixFd, 0); }
Res mem_import(Handle* h, int fd) {
  return A().mem_import(h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)), kPosixFd);
}
Res mem_props(Prop* p, Handle h) { return A().mem_props(p, h); }
Res mem_reserve(Ptr* p, size_t n) { return A().mem_reserve(p, n, 0, 0, 0); }
Res mem_free_va(Ptr p, size_t n) { return A().mem_free_va(p, n); }
Res mem_map(Ptr p, size_t n, Handle h) { return A().mem_map(p, n, 0, h, 0); }
Res mem_unmap(Ptr p, size_t n) { return A().mem_unmap(p, n); }
Res mem_set_access(Ptr p, size_t n, const AccessDesc* d) { return A().mem_set_access(p, n, d, 1); }
Res mem_create(Handle* h, size_t n, const Prop* p) { return A().mem_create(h, n, p, 0); }
Res mem_granularity(size_t* g, const Prop* p) {
  return A().mem_granularity(g, p, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
}
[[noreturn]] void fail(Res r, const char* call) { driver::throw_error(r, call); }
Prop device_prop(int dev, bool shareable) {
  Prop p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  p.requestedHandleTypes = shareable ? kPosixFd : CU_MEM_HANDLE_TYPE_NONE;
  return p;
}
bool has_fd_type(const Prop& p) { return (p.requestedHandleTypes & kPosixFd) != 0; }
AccessDesc rw_access(int dev) {
  AccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = dev;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}
uint64_t to_u64(Handle h) { return static_cast<uint64_t>(h); }
Handle from_u64(uint64_t h) { return static_cast<Handle>(h); }
int exchange_capture_mode(int m) {
  cudaStreamCaptureMode mode = static_cast<cudaStreamCaptureMode>(m);
  if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) return -1;
  return static_cast<int>(mode);
}
constexpr int kRelaxed = cudaStreamCaptureModeRelaxed;
#endif

Ptr to_ptr(const void* p) { return (Ptr)(uintptr_t)(p); }
void* from_ptr(Ptr p) { return (void*)(uintptr_t)(p); }
void check(Res r, const char* call) {
  if (r != kOk) fail(r, call);
}

}  // namespace

// cuMemGetAddressRange on VMM memory answers with the range of the one cuMemMap'ed chunk holding
// p (not the whole reservation), which is exactly what the chunk walk (chunks.h) asks for.
bool vmm_chunk_at(const void* p, uint64_t* base, uint64_t* size, uint64_t* handle) {
  Handle h{};
  if (mem_retain(&h, const_cast<void*>(p)) != kOk) return false;
  Ptr b{};
  size_t s = 0;
  if (get_range(&b, &s, to_ptr(p)) != kOk || s == 0) {
    (void)mem_release(h);
    return false;
  }
  *base = static_cast<uint64_t>((uintptr_t)from_ptr(b));
  *size = s;
  *handle = to_u64(h);
  return true;
}

bool vmm_needs_fd_export(const void* p) {
#if defined(PEERLINK_HIP)
  Handle h{};
  if (mem_retain(&h, const_cast<void*>(p)) != kOk) {
    (void)hipGetLastError();
    return false;
  }
  (void)mem_release(h);
  return true;
#else
  int capable = 0;
  CUresult e = A().ptr_attr(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, to_ptr(p));
  return e != CUDA_SUCCESS || capable == 0;
#endif
}

void vmm_release(uint64_t handle) noexcept {
  if (handle) (void)mem_release(from_u64(handle));
}

int vmm_export_fd(uint64_t handle) {
  Prop p{};
  check(mem_props(&p, from_u64(handle)), kApi[0] == 'h' ? "hipMemGetAllocationPropertiesFromHandle"
                                                        : "cuMemGetAllocationPropertiesFromHandle");
  if (!has_fd_type(p))
    throw UnsupportedError("the VMM allocation was created without the POSIX file descriptor handle type "
                           "(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR / hipMemHandleTypePosixFileDescriptor in "
                           "the allocation's requested handle types), so it cannot be shared with another process");
  int fd = -1;
  check(mem_export(&fd, from_u64(handle)), kApi[0] == 'h' ? "hipMemExportToShareableHandle" : "cuMemExportToShareableHandle");
  return fd;
}

uint64_t vmm_import_fd(int fd) {
  Handle h{};
  check(mem_import(&h, fd), kApi[0] == 'h' ? "hipMemImportFromShareableHandle" : "cuMemImportFromShareableHandle");
  return to_u64(h);
}

void* vmm_map_chunks(int dev, const uint64_t* handles, const uint64_t* sizes, size_t n) {
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) total += sizes[i];
  Ptr base{};
  check(mem_reserve(&base, total), kApi[0] == 'h' ? "hipMemAddressReserve" : "cuMemAddressReserve");
  size_t mapped = 0;
  try {
    for (size_t i = 0; i < n; ++i) {
      check(mem_map(to_ptr(static_cast<char*>(from_ptr(base)) + mapped), sizes[i], from_u64(handles[i])),
            kApi[0] == 'h' ? "hipMemMap" : "cuMemMap");
      mapped += sizes[i];
    }
    AccessDesc d = rw_access(dev);
    check(mem_set_access(base, total, &d), kApi[0] == 'h' ? "hipMemSetAccess" : "cuMemSetAccess");
  } catch (...) {
    if (mapped) (void)mem_unmap(base, mapped);
    (void)mem_free_va(base, total);
    throw;
  }
  return from_ptr(base);
}

void vmm_unmap_range(void* base, size_t bytes) noexcept {
  if (!base) return;
  (void)mem_unmap(to_ptr(base), bytes);
  (void)mem_free_va(to_ptr(base), bytes);
}

size_t vmm_granularity(int dev) {
  Prop p = device_prop(dev, true);
  size_t g = 0;
  check(mem_granularity(&g, &p), "MemGetAllocationGranularity");
  return g;
}

void* vmm_test_alloc(int dev, size_t chunk_bytes, int chunks, bool shareable) {
  Prop p = device_prop(dev, shareable);
  std::vector<uint64_t> hs, sizes;
  try {
    for (int i = 0; i < chunks; ++i) {
      Handle h{};
      check(mem_create(&h, chunk_bytes, &p), kApi[0] == 'h' ? "hipMemCreate" : "cuMemCreate");
      hs.push_back(to_u64(h));
      sizes.push_back(chunk_bytes);
    }
    void* base = vmm_map_chunks(dev, hs.data(), sizes.data(), hs.size());
    for (uint64_t h : hs) vmm_release(h);  // the mappings keep the memory
    return base;
  } catch (...) {
    for (uint64_t h : hs) vmm_release(h);
    throw;
  }
}

void vmm_test_free(void* p, size_t bytes) noexcept { vmm_unmap_range(p, bytes); }

RelaxedCaptureMode::RelaxedCaptureMode() : saved_(exchange_capture_mode(kRelaxed)) {}
RelaxedCaptureMode::~RelaxedCaptureMode() {
  if (saved_ >= 0) (void)exchange_capture_mode(saved_);
}

}  // namespace peerlink::gpu
#endif
