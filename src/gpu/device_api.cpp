// include/peerlink/device.h over the shim (gpu/runtime.h): the public face of a few runtime calls.
#include <cstring>

#include "gpu/runtime.h"
#include "gpu/vmm.h"
#include "peerlink/device.h"

namespace peerlink::device {

const char* runtime_name() { return gpu::runtime_name(); }
bool compiled_with_gpu() { return gpu::compiled_with_gpu(); }
int count() { return gpu::device_count(); }
void set_current(int dev) { gpu::set_device(dev); }
int current() { return gpu::current_device(); }
bool is_device_pointer(const void* p) { return gpu::is_device_pointer(p); }

void* alloc(size_t bytes) { return gpu::device_malloc(bytes); }
void free(void* p) {
  if (p) gpu::device_free(p);
}

void* alloc_capture_safe(size_t bytes) {
  gpu::RelaxedCaptureMode relaxed;
  return gpu::device_malloc(bytes);
}

RelaxedCaptureScope::RelaxedCaptureScope() : impl_(new gpu::RelaxedCaptureMode) {}
RelaxedCaptureScope::~RelaxedCaptureScope() { delete static_cast<gpu::RelaxedCaptureMode*>(impl_); }

void copy_sync(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (!gpu::compiled_with_gpu() || (!gpu::is_device_pointer(dst) && !gpu::is_device_pointer(src))) {
    std::memcpy(dst, src, bytes);
    return;
  }
  gpu::memcpy_sync(dst, src, bytes);
}

void copy_async(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return;
  gpu::memcpy_async(dst, src, bytes, stream);
}

Stream stream_create() { return gpu::stream_create(); }
void stream_sync(Stream s) { gpu::stream_sync(s); }
void stream_destroy(Stream s) { gpu::stream_destroy(s); }

Event timing_event_create() { return gpu::event_create_timed(); }
void event_record(Event e, Stream s) { gpu::event_record(e, s); }
float elapsed_ms(Event start, Event end) { return gpu::event_elapsed_ms(start, end); }
void event_destroy(Event e) { gpu::event_destroy(e); }

void begin_capture(Stream s) { gpu::stream_begin_capture(s); }
bool is_capturing(Stream s) { return gpu::stream_is_capturing(s); }
Graph end_capture(Stream s) { return gpu::stream_end_capture(s); }
void graph_launch(Graph g, Stream s) { gpu::graph_launch(g, s); }
void graph_destroy(Graph g) { gpu::graph_destroy(g); }

}  // namespace peerlink::device
