// Stream-ordered send/recv and groups for Python (Communicator::send / recv / group_start /
// group_end). Pointer-level like the rest of the module: peerlink/_comm.py resolves tensors and
// streams. On GPUs the calls only enqueue (they return at once); on the host backend they run
// synchronously and may wait for the peer, so every call releases the GIL.
#include <pybind11/pybind11.h>

#include <cstdint>

#include "bindings.h"
#include "peerlink/peerlink.h"

namespace py = pybind11;

namespace peerlink::py_binding {

namespace {
void* ptr(uintptr_t p) { return reinterpret_cast<void*>(p); }
}  // namespace

void register_stream(py::module_& m) {
  using C = Communicator;
  // NCCL form: any buffers of the communicator's device; stream 0 = the legacy default stream.
  m.def("stream_send", [](C& c, int peer, uintptr_t src, size_t len, uintptr_t stream) {
    py::gil_scoped_release nogil;
    c.send(peer, ptr(src), len, ptr(stream));
  });
  m.def("stream_recv", [](C& c, int peer, uintptr_t dst, size_t len, uintptr_t stream) {
    py::gil_scoped_release nogil;
    c.recv(peer, ptr(dst), len, ptr(stream));
  });
  // Published-buffer form: into the peer's buffer `buf_id` (published at `version`) at `offset`.
  m.def("stream_send_published", [](C& c, int peer, uintptr_t src, size_t len, uint32_t buf_id, size_t offset,
                                     uint64_t version, uintptr_t stream) {
    py::gil_scoped_release nogil;
    c.send(peer, ptr(src), len, buf_id, offset, version, ptr(stream));
  });
  m.def("stream_recv_published", [](C& c, int peer, uint32_t buf_id, size_t offset, size_t len, uintptr_t stream) {
    py::gil_scoped_release nogil;
    c.recv(peer, buf_id, offset, len, ptr(stream));
  });
  // Reads only: safe from a watchdog thread beside the owner's calls (GIL released).
  m.def("check_async_error", [](C& c) {
    py::gil_scoped_release nogil;
    c.check_async_error();
  });
  m.def("group_start", [](C& c) { c.group_start(); });
  m.def("group_end", [](C& c) {
    py::gil_scoped_release nogil;
    c.group_end();
  });
}

}  // namespace peerlink::py_binding
