// Host-only build: no GPU runtime. Every device call is an UnsupportedError; pinning is a no-op.
#include "gpu/runtime.h"

#include "peerlink/errors.h"

namespace peerlink::gpu {
namespace {
[[noreturn]] void no_gpu(const char* what) {
  throw UnsupportedError(std::string(what) + ": peerlink was built without CUDA or HIP");
}
}  // namespace

const char* runtime_name() { return "none"; }
bool compiled_with_gpu() { return false; }
int device_count() { return 0; }
void set_device(int) { no_gpu("set_device"); }
int current_device() { return -1; }
SavedDevice enter_device(int dev) {
  if (dev >= 0) no_gpu("enter_device");
  return SavedDevice{};
}
void leave_device(const SavedDevice&) noexcept {}
std::string pci_bus_id(int) { no_gpu("pci_bus_id"); }
bool can_access_peer(int, int) { return false; }
void enable_peer_access(int, int) {}
int p2p_link_hint(int, int) { return -1; }
void* device_malloc(size_t) { no_gpu("device_malloc"); }
void device_free(void*) {}
bool is_device_pointer(const void*) { return false; }
AddressRange address_range(const void*) { no_gpu("address_range"); }
bool ipc_capable(const void*) { return false; }
uint64_t buffer_id(const void*) { return 0; }
void ipc_get_handle(void*, unsigned char*) { no_gpu("ipc_get_handle"); }
void* ipc_open(const unsigned char*) { no_gpu("ipc_open"); }
void ipc_close(void*) {}
Stream stream_create() { no_gpu("stream_create"); }
void stream_destroy(Stream) {}
void stream_sync(Stream) {}
Event event_create() { no_gpu("event_create"); }
void event_destroy(Event) {}
void event_record(Event, Stream) { no_gpu("event_record"); }
bool event_query(Event) { return true; }
void stream_wait_event(Stream, Event) {}
void memcpy_async(void*, const void*, size_t, Stream) { no_gpu("memcpy_async"); }
void memcpy_sync(void*, const void*, size_t) { no_gpu("memcpy_sync"); }
void memset_sync(void*, int, size_t) { no_gpu("memset_sync"); }
void host_register(void*, size_t) {}
void host_unregister(void*) {}
void* host_device_pointer(void* p) { return p; }
void launch_copy_signal(void*, const void*, size_t, void*, uint64_t, Stream) { no_gpu("launch_copy_signal"); }
void stream_write_value64(Stream, void*, uint64_t) { no_gpu("stream_write_value64"); }
void launch_armed_send(ArmedSlot*, uint64_t, uint64_t, uint64_t*, Stream) { no_gpu("launch_armed_send"); }

}  // namespace peerlink::gpu

// ---- benchmarks support ----
namespace peerlink::gpu {
void stream_begin_capture(Stream) { no_gpu("stream_begin_capture"); }
GraphExec stream_end_capture(Stream) { no_gpu("stream_end_capture"); }
void graph_launch(GraphExec, Stream) { no_gpu("graph_launch"); }
void graph_destroy(GraphExec) {}
}  // namespace peerlink::gpu

// ---- collectives support ----
namespace peerlink::gpu {
bool stream_is_capturing(Stream) { return false; }
uint64_t capture_id(Stream) { return 0; }
bool capture_retain(Stream, void (*)(void*), void*) { return false; }
bool capture_retain_supported() { return false; }
void* host_alloc_mapped(size_t) { no_gpu("host_alloc_mapped"); }
void host_free_mapped(void*) {}
void* device_malloc_flags(size_t) { no_gpu("device_malloc_flags"); }
int multiprocessor_count(int) { return 0; }
int compute_capability(int) { return 0; }
Event event_create_timed() { no_gpu("event_create_timed"); }
float event_elapsed_ms(Event, Event) { no_gpu("event_elapsed_ms"); }
}  // namespace peerlink::gpu

// ---- tests support ----
namespace peerlink::gpu {
int pointer_device(const void*) { return -1; }
int context_active(int) { return -1; }
}  // namespace peerlink::gpu
