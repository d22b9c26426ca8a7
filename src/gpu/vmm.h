// The runtime's virtual memory management (CUDA cuMem*, HIP hipMem*) as far as peerlink needs it:
// find the physical chunks behind a VMM range, export each chunk as a POSIX file descriptor, and
// on the importing side map a list of imported chunks back to back into one reserved range. Host
// builds get stubs that throw UnsupportedError. Handles are opaque 64-bit values.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>

namespace peerlink::gpu {

// True when p is VMM memory that the legacy IPC handles cannot export. CUDA: the pointer is not
// legacy-IPC capable (one attribute query, the legacy path's cost is unchanged). HIP, whose
// attribute does not exist: an allocation handle can be retained at p (only VMM mappings have one).
bool vmm_needs_fd_export(const void* p);
// The chunk mapped at p: its mapped range and a *retained* allocation handle (release with
// vmm_release). False when p is not mapped by the VMM API.
bool vmm_chunk_at(const void* p, uint64_t* base, uint64_t* size, uint64_t* handle);
void vmm_release(uint64_t handle) noexcept;
// A POSIX file descriptor for the allocation (the caller owns it). UnsupportedError when the
// allocation was created without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR among its handle types.
int vmm_export_fd(uint64_t handle);
uint64_t vmm_import_fd(int fd);  // a new allocation handle (release once mapped)
// Reserves `bytes` of device address space, maps the chunks in order, grants `dev` read/write.
// Returns the base; on error everything done so far is undone.
void* vmm_map_chunks(int dev, const uint64_t* handles, const uint64_t* sizes, size_t n);
void vmm_unmap_range(void* base, size_t bytes) noexcept;  // unmap + free the reservation
// Tests: a VMM allocation of `chunks` chunks of `chunk_bytes` (a multiple of vmm_granularity)
// mapped back to back, exportable by POSIX fd when `shareable`. Free with vmm_test_free.
size_t vmm_granularity(int dev);
void* vmm_test_alloc(int dev, size_t chunk_bytes, int chunks, bool shareable);
void vmm_test_free(void* p, size_t bytes) noexcept;

// The calling thread's stream capture mode set to relaxed for the scope: mapping and export calls
// (cuMemMap, cuMemImportFromShareableHandle, ...) are not stream work, and in relaxed mode they are
// legal while some stream of the process is being captured, instead of invalidating that capture.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode();
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  int saved_ = -1;
};

}  // namespace peerlink::gpu
