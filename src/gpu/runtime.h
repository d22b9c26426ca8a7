// The GPU shim: the only interface through which peerlink reaches CUDA or HIP. One implementation
// (runtime_gpu.cpp, on the name mapping of gpu_api.h) is compiled against CUDA or HIP;
// runtime_none.cpp serves host-only builds. Nothing above src/gpu/ includes a CUDA or HIP header
// (.cu kernels reach the device side through gpu/device.h). Failing runtime calls throw GpuError
// (code + the runtime's call name; message with the error string and the device).
// Owners of what these functions create (streams, events, registrations, mappings) and the
// device guard are in gpu/owners.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace peerlink::gpu {

const char* runtime_name();  // "cuda", "hip" or "none"
bool compiled_with_gpu();
int device_count();          // 0 when no driver or no device: never throws
void set_device(int dev);  // for threads the library owns (workers) and tests; else DeviceGuard
int current_device();
// The calling thread's current device as enter_device found it, for leave_device to put back.
// On CUDA it is the driver's current context (nullptr when the thread has none): restoring it
// exactly never creates a context on a device the thread had not used (cudaSetDevice(prev) would).
struct SavedDevice {
  void* ctx = nullptr;
  int dev = -1;
  bool changed = false;  // false: nothing to put back
};
// Makes `dev` current on this thread unless it already is; dev < 0 (host) does nothing. Use
// DeviceGuard (owners.h) rather than calling these directly.
SavedDevice enter_device(int dev);
void leave_device(const SavedDevice& saved) noexcept;
std::string pci_bus_id(int dev);  // "0000:3b:00.0"
bool can_access_peer(int dev, int peer);
// Lets kernels on `dev` touch memory of `peer` in this process (cudaDeviceEnablePeerAccess from
// dev's context); already enabled is fine. IPC-opened memory needs no call (opened with lazy access).
void enable_peer_access(int dev, int peer);
// 1 when the two devices are linked by NVLink/xGMI as far as the runtime tells; -1 unknown.
int p2p_link_hint(int dev, int peer);

void* device_malloc(size_t bytes);
void device_free(void* p);

struct AddressRange {
  void* base = nullptr;
  size_t size = 0;
};
bool is_device_pointer(const void* p);
// Base and size of the allocation containing p; throws InvalidArgument for non-device memory.
AddressRange address_range(const void* p);
// False for memory that the legacy IPC API cannot export (VMM / expandable segments).
bool ipc_capable(const void* p);
// Runtime-unique id of the allocation holding p (never reused within the process), 0 if unknown.
uint64_t buffer_id(const void* p);

constexpr size_t kIpcHandleBytes = 64;
void ipc_get_handle(void* base, unsigned char out[kIpcHandleBytes]);
void* ipc_open(const unsigned char handle[kIpcHandleBytes]);
void ipc_close(void* p);

using Stream = void*;
using Event = void*;
Stream stream_create();  // non-blocking stream
void stream_destroy(Stream s);
void stream_sync(Stream s);
Event event_create();    // timing disabled
void event_destroy(Event e);
void event_record(Event e, Stream s);
bool event_query(Event e);  // true when complete; throws on a sticky error
void stream_wait_event(Stream s, Event e);
void memcpy_async(void* dst, const void* src, size_t bytes, Stream s);
void memcpy_sync(void* dst, const void* src, size_t bytes);
void memset_sync(void* dst, int value, size_t bytes);

void host_register(void* p, size_t bytes);  // pin (page-lock) host memory, e.g. a relay ring
void host_unregister(void* p);
// Device-visible address of registered host memory (for stream_write_value64).
void* host_device_pointer(void* p);
// Stream-ordered 64-bit store into device-visible memory, after a system-wide memory barrier: the
// copy engine's completion signal without a CPU round trip.
void stream_write_value64(Stream s, void* device_addr, uint64_t value);
// Small sends: one kernel copies dst <- src and then stores `value` at flag_device_addr
// (copy_kernel.cu), ordered on stream s like a copy followed by stream_write_value64.
void launch_copy_signal(void* dst, const void* src, size_t bytes, void* flag_device_addr, uint64_t value, Stream s);
// Small sends launched ahead of their messages (armed_lane.h): the kernel serves sends first_seq,
// first_seq + 1, ... in order, send q in slots[q % kArmedSlots] (device-visible host memory). For
// each, thread i polls field i until every field carries q, then the block copies f[kArmedBytes]
// bytes from f[kArmedSrc] to f[kArmedDst], fences at system scope, stores f[kArmedValue] at the
// device address f[kArmedFlag] and stores q at *consumed_dev (the slot may be reused). A field
// carrying ~q ends the kernel (cancelled); so does deadman_ns without a fill (the host is gone),
// after one last look. One block of 256 threads; at most kArmedMaxBytes per send.
struct alignas(16) ArmedField {
  uint64_t seq, x;
};
enum ArmedFieldIndex { kArmedSrc = 0, kArmedDst, kArmedBytes, kArmedFlag, kArmedValue, kArmedFields };
struct alignas(128) ArmedSlot {
  ArmedField f[kArmedFields];
};
constexpr size_t kArmedMaxBytes = 16384;
constexpr uint64_t kArmedSlots = 16;
void launch_armed_send(ArmedSlot* slots_dev, uint64_t first_seq, uint64_t deadman_ns, uint64_t* consumed_dev, Stream s);

}  // namespace peerlink::gpu

// ---- benchmarks support ----
// Graph capture of a stream, for the benchmarks' nccl-tests style -G mode. Capture is thread-local
// (cudaStreamCaptureModeThreadLocal) so the transport's worker threads are unaffected.
namespace peerlink::gpu {
using GraphExec = void*;  // an instantiated, launchable graph
void stream_begin_capture(Stream s);
// Ends the capture and instantiates it; throws Error (capture invalidated, e.g. by a synchronizing
// call inside) after the stream has left capture mode.
GraphExec stream_end_capture(Stream s);
void graph_launch(GraphExec g, Stream s);
void graph_destroy(GraphExec g);
// Timing events (nccl-tests style: time back-to-back work on one stream with events).
Event event_create_timed();
float event_elapsed_ms(Event start, Event end);  // both recorded and complete
}  // namespace peerlink::gpu

// ---- collectives support ----
namespace peerlink::gpu {
// True while `s` is being captured into a graph (then nothing host-synchronous may run on it).
bool stream_is_capturing(Stream s);
// The id of the capture under way on `s` (unique in the process), 0 when `s` is not capturing.
uint64_t capture_id(Stream s);
// While `s` is being captured: the graph under capture, and every executable graph instantiated
// from it, hold one reference (a CUDA user object) that calls release(arg) once the last of them is
// destroyed and their launches have completed; release runs on a runtime thread and must not call
// the runtime. False when `s` is not capturing (release is never called). Throws GpuError when the
// runtime refuses; release(arg) has then run, or will run, once.
bool capture_retain(Stream s, void (*release)(void*), void* arg);
// Whether capture_retain can hold anything at all (CUDA: yes; HIP builds and host builds: no).
bool capture_retain_supported();
// Pinned host memory mapped into the device address space (the device writes, the host reads
// without any runtime call): error words of stream-ordered collectives. Zeroed.
void* host_alloc_mapped(size_t bytes);
void host_free_mapped(void* p);
// Device memory for cross-GPU flags: fine-grained / uncached on HIP (peers' stores must be seen by
// local spins), plain device memory on CUDA. Exportable with the IPC API; free with device_free.
void* device_malloc_flags(size_t bytes);
int multiprocessor_count(int dev);
// major * 10 + minor on CUDA (90 = Hopper); 0 on HIP and without a GPU.
int compute_capability(int dev);
}  // namespace peerlink::gpu

// ---- tests support ----
namespace peerlink::gpu {
int pointer_device(const void* p);  // device holding a device allocation; -1 for anything else
// 1 when this process has a context on `dev` (CUDA: its primary context is active), 0 when not,
// -1 when the runtime cannot tell (HIP, host builds).
int context_active(int dev);
}  // namespace peerlink::gpu
