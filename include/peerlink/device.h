// Small device utilities for applications, benchmarks and the Python binding, so that they need no
// private header (layer gpu/: implemented over the library's CUDA/HIP shim). Streams, events and
// graphs are the runtime's handles as void* (cudaStream_t / hipStream_t, ...). In a host-only
// build every call that needs a GPU throws UnsupportedError; stream_sync/destroy are no-ops there.
#pragma once
#include <cstddef>

namespace peerlink::device {

const char* runtime_name();  // "cuda", "hip" or "none"
bool compiled_with_gpu();
int count();                 // GPUs visible (0 without a driver): never throws
void set_current(int dev);   // the calling thread's current device (cudaSetDevice)
int current();               // the calling thread's current device (cudaGetDevice); -1 in host-only builds
bool is_device_pointer(const void* p);

// Plain device memory of the current device (cudaMalloc / hipMalloc): not exportable through
// peerlink's IPC unless the runtime can export it; for buffers of the NCCL-form calls and tests.
void* alloc(size_t bytes);
void free(void* p);
// alloc() that is legal while a stream of the process is being captured: the calling thread's
// capture mode is relaxed for the call (cudaThreadExchangeStreamCaptureMode, as NCCL does), so a
// global-mode capture is not invalidated. The memory must outlive every graph that uses it.
void* alloc_capture_safe(size_t bytes);
// The calling thread's stream capture mode relaxed for the scope (cudaThreadExchangeStreamCaptureMode):
// the one-time setup of a first call (allocations, mappings) is then legal while a stream of the
// process is being captured in global mode. No-op in host-only builds.
class RelaxedCaptureScope {
 public:
  RelaxedCaptureScope();
  ~RelaxedCaptureScope();
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  void* impl_;
};

// Synchronous copy in any direction (device or host memory on either side), landed on return. It
// waits for this copy only, not for work on other streams: synchronize those first when the copy
// reads what they write. Host to host is a plain memcpy (also in host-only builds).
void copy_sync(void* dst, const void* src, size_t bytes);
// Stream-ordered copy (cudaMemcpyAsync, any direction; capturable). UnsupportedError in host-only builds.
void copy_async(void* dst, const void* src, size_t bytes, void* stream);

using Stream = void*;
Stream stream_create();  // non-blocking stream on the current device
void stream_sync(Stream s);
void stream_destroy(Stream s);

// Timing events: record around work on one stream, then elapsed_ms once both completed.
using Event = void*;
Event timing_event_create();
void event_record(Event e, Stream s);
float elapsed_ms(Event start, Event end);
void event_destroy(Event e);

// Graph capture of one stream (thread-local capture mode), then launch the instantiated graph.
using Graph = void*;
void begin_capture(Stream s);
// True while `s` is being captured into a graph (cudaStreamIsCapturing); false in host-only builds.
bool is_capturing(Stream s);
// Ends the capture and instantiates it; throws Error (capture invalidated) after the stream left
// capture mode.
Graph end_capture(Stream s);
void graph_launch(Graph g, Stream s);
void graph_destroy(Graph g);

}  // namespace peerlink::device
