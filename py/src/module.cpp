// pybind11 module `peerlink._peerlink`: the raw, pointer-level binding of the C++ API.
//
// The public Python API (tensor handling, stream ordering, devices) lives in peerlink/*.py; this
// file only moves integers (addresses, sizes) across and makes three guarantees that need C++:
//   * every call that can block releases the GIL;
//   * Ctrl-C raises KeyboardInterrupt promptly from every blocking call, while each stays bounded
//     by the caller's timeout (or the communicator's): request waits run as slices of at most
//     kWaitSliceMs with PyErr_CheckSignals between them, and the library's own waits
//     (rendezvous, barrier, wait_ipc_buffer, a send waiting for a publication, host allreduce)
//     call check_signals through Options::interrupt_check;
//   * C++ errors map to the peerlink.Error hierarchy (InvalidArgument is also a ValueError,
//     TimeoutError also the builtin TimeoutError).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "peerlink/peerlink.h"

namespace py = pybind11;
using namespace std::chrono;

namespace peerlink::py_binding {
namespace {

constexpr int64_t kWaitSliceMs = 50;

// Exception classes, created once at import and kept for the life of the interpreter.
PyObject* g_error = nullptr;
PyObject* g_invalid = nullptr;
PyObject* g_timeout = nullptr;
PyObject* g_peer_lost = nullptr;
PyObject* g_unsupported = nullptr;

PyObject* new_exception(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string qual = std::string("peerlink.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qual.c_str(), doc, bases, nullptr);
  if (!cls) throw py::error_already_set();
  m.attr(name) = py::handle(cls);  // module keeps a reference; we keep ours forever
  return cls;
}

// Options::interrupt_check: runs from a C++ wait (GIL released) every ~20 ms. Runs Python's
// signal handlers (only the main thread has any) and throws what one raised, KeyboardInterrupt
// for Ctrl-C, through the library: its waits unwind, and pybind11 restores the Python error.
void check_signals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// The communicator is shared with allocations (which must free into it) and requests; its
// teardown may join worker threads, so the last owner drops it with the GIL released.
std::shared_ptr<Communicator> make_comm(const std::string& uid, int rank, int world, int device,
                                        std::optional<double> timeout_s) {
  Options opts = Options::from_env();
  opts.interrupt_check = check_signals;
  if (timeout_s) {
    if (!(*timeout_s > 0))
      throw InvalidArgument("timeout must be > 0 seconds, got " + std::to_string(*timeout_s));
    opts.timeout = milliseconds(std::max<int64_t>(1, static_cast<int64_t>(*timeout_s * 1000.0)));
  }
  Communicator* raw;
  {
    py::gil_scoped_release nogil;
    raw = new Communicator(uid, rank, world, device, opts);
  }
  return std::shared_ptr<Communicator>(raw, [](Communicator* c) {
    if (PyGILState_Check()) {
      py::gil_scoped_release nogil;
      delete c;
    } else {
      delete c;
    }
  });
}

// Memory from Communicator::alloc, freed when the Python owner (array base, tensor owner) dies.
struct Allocation {
  std::shared_ptr<Communicator> comm;
  void* ptr = nullptr;
  size_t nbytes = 0;
  ~Allocation() {
    if (!ptr || comm->closed()) return;  // close() already released every allocation
    auto release = [this] {
      try {
        comm->free(ptr);
      } catch (const std::exception&) {
        // A destructor must not throw; a failed free leaves the memory to close().
      }
    };
    if (PyGILState_Check()) {  // freeing device memory can synchronize: let other threads run
      py::gil_scoped_release nogil;
      release();
    } else {
      release();
    }
  }
};

// Sources of sends whose Request object was dropped before completion: the copy still reads
// them, so they stay referenced here until the operation ends (like torch keeps the tensors of
// an unwaited isend). Swept, with the GIL held, whenever a request is created. Heap-allocated and
// never destroyed: Python objects must not be released after interpreter finalization.
std::vector<std::pair<Request, py::object>>& orphans() {
  static auto* v = new std::vector<std::pair<Request, py::object>>();
  return *v;
}

void sweep_orphans() {
  auto& v = orphans();
  v.erase(std::remove_if(v.begin(), v.end(), [](std::pair<Request, py::object>& o) {
            try {
              return o.first.test();
            } catch (...) {
              return true;  // failed: nothing reads the source any more
            }
          }),
          v.end());
}

// A Request plus what Python needs around it: the objects that must outlive the operation
// (the source tensor of a send), a description for timeout messages and the default bound.
struct PyRequest {
  Request req;
  py::object keepalive;
  std::string what;
  int64_t default_timeout_ms = 60000;
  bool done = false;

  ~PyRequest() {
    if (done || keepalive.is_none()) return;
    bool pending;
    try {
      pending = !req.test();
    } catch (...) {
      pending = false;
    }
    if (pending) orphans().emplace_back(req, std::move(keepalive));
  }

  void finish() {
    done = true;
    keepalive = py::none();
  }

  bool test() {
    if (done) return true;
    bool ok;
    try {
      ok = req.test();
    } catch (...) {
      finish();
      throw;
    }
    if (ok) finish();
    return ok;
  }

  // One bounded slice with the GIL released. True when complete.
  bool wait_slice(int64_t ms) {
    bool ok;
    {
      py::gil_scoped_release nogil;
      try {
        req.wait(milliseconds(ms));
        ok = true;
      } catch (const TimeoutError&) {
        // Either the slice ran out (resumable) or the operation itself failed with a timeout:
        // test() rethrows the latter and tells the former apart.
        ok = req.test();
      }
    }
    return ok;
  }

  void wait(std::optional<double> timeout_s) {
    if (done) return;
    int64_t total_ms = default_timeout_ms;
    if (timeout_s) {
      if (*timeout_s < 0) throw InvalidArgument("timeout must be >= 0 seconds");
      total_ms = static_cast<int64_t>(*timeout_s * 1000.0);
    }
    const auto deadline = steady_clock::now() + milliseconds(total_ms);
    for (;;) {
      int64_t left = duration_cast<milliseconds>(deadline - steady_clock::now()).count();
      bool ok;
      try {
        ok = wait_slice(std::clamp<int64_t>(left, 0, kWaitSliceMs));
      } catch (...) {
        finish();
        throw;
      }
      if (ok) {
        finish();
        return;
      }
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (steady_clock::now() >= deadline)
        throw TimeoutError(what + ": not complete after " + std::to_string(total_ms) + " ms");
    }
  }
};

PyRequest* make_request(Request r, py::object keep, std::string what, const Communicator& c) {
  if (!orphans().empty()) sweep_orphans();
  auto* pr = new PyRequest();
  pr->req = std::move(r);
  pr->keepalive = std::move(keep);
  pr->what = std::move(what);
  pr->default_timeout_ms = c.options().timeout.count();
  return pr;
}

void* as_ptr(uintptr_t p) { return reinterpret_cast<void*>(p); }

std::string describe(const char* op, int peer, uint32_t id, size_t len) {
  return std::string(op) + " rank " + std::to_string(peer) + " (ipc_id " + std::to_string(id) +
         ", " + std::to_string(len) + " bytes)";
}

}  // namespace

void register_errors(py::module_& m) {
  g_error = new_exception(m, "Error", PyExc_RuntimeError, "Base of every peerlink error.");
  py::tuple inv_bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
  g_invalid = new_exception(m, "InvalidArgument", inv_bases.ptr(),
                            "A wrong argument (bad rank, size, stale version, call after close, ...).");
  py::tuple to_bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_TimeoutError));
  g_timeout = new_exception(m, "TimeoutError", to_bases.ptr(), "A bounded wait ran out.");
  g_peer_lost = new_exception(m, "PeerLostError", g_error, "A peer process died or left.");
  g_unsupported = new_exception(m, "UnsupportedError", g_error,
                                "The operation cannot be served here.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      PyErr_SetString(g_invalid, e.what());
    } catch (const TimeoutError& e) {
      PyErr_SetString(g_timeout, e.what());
    } catch (const PeerLostError& e) {
      PyErr_SetString(g_peer_lost, e.what());
    } catch (const UnsupportedError& e) {
      PyErr_SetString(g_unsupported, e.what());
    } catch (const Error& e) {
      PyErr_SetString(g_error, e.what());
    }
  });
}

void register_comm(py::module_& m) {
  py::class_<Allocation, std::shared_ptr<Allocation>>(m, "Allocation")
      .def_readonly("ptr", &Allocation::ptr)
      .def_property_readonly("address", [](const Allocation& a) { return reinterpret_cast<uintptr_t>(a.ptr); })
      .def_readonly("nbytes", &Allocation::nbytes);

  py::class_<PyRequest>(m, "Request")
      .def("test", &PyRequest::test, "True when complete; raises the operation's error if it failed.")
      .def("wait", &PyRequest::wait, py::arg("timeout") = py::none(),
           "Waits up to `timeout` seconds (None: the communicator's timeout). Ctrl-C interrupts.")
      .def_property_readonly("done", [](const PyRequest& r) { return r.done; })
      .def("__repr__", [](const PyRequest& r) {
        return "<peerlink.Request " + r.what + (r.done ? " done>" : " pending>");
      });

  using C = Communicator;
  py::class_<C, std::shared_ptr<C>>(m, "_Communicator")
      .def(py::init(&make_comm), py::arg("unique_id"), py::arg("rank"), py::arg("world_size"),
           py::arg("device"), py::arg("timeout") = py::none())
      .def_property_readonly("rank", &C::rank)
      .def_property_readonly("world_size", &C::world_size)
      .def_property_readonly("device", &C::device)
      .def_property_readonly("unique_id", &C::unique_id)
      .def_property_readonly("closed", &C::closed)
      .def_property_readonly("timeout_ms", [](const C& c) { return c.options().timeout.count(); })
      .def("alloc", [](std::shared_ptr<C> c, size_t nbytes) {
        auto a = std::make_shared<Allocation>();
        {
          py::gil_scoped_release nogil;
          a->ptr = c->alloc(nbytes);
        }
        a->comm = std::move(c);
        a->nbytes = nbytes;
        return a;
      })
      .def("notify_ipc_buffer", [](C& c, int peer, uint32_t id, uintptr_t ptr, size_t len, uint64_t ver) {
        py::gil_scoped_release nogil;
        c.notify_ipc_buffer(peer, id, as_ptr(ptr), len, ver);
      })
      .def("wait_ipc_buffer", &C::wait_ipc_buffer, py::call_guard<py::gil_scoped_release>())
      .def("isend", [](C& c, int peer, uintptr_t src, size_t len, uint32_t id, size_t offset,
                       uint64_t ver, py::object keep) {
        Request r;
        {
          py::gil_scoped_release nogil;
          r = c.isend(peer, as_ptr(src), len, id, offset, ver);
        }
        return make_request(std::move(r), std::move(keep), describe("send to", peer, id, len), c);
      }, py::return_value_policy::take_ownership)
      // The C++ send_direct, not isend + wait: on a timeout, a lost peer or Ctrl-C (its waits run
      // check_signals through Options::interrupt_check) it gives the message up before raising, so
      // a returned call never reads the tensor again. The caller's frame keeps the
      // tensor alive for the duration of the call.
      .def("send_direct", [](C& c, int peer, uintptr_t src, size_t len, uint32_t id, size_t offset,
                             uint64_t ver, std::optional<double> timeout_s) {
        milliseconds t = c.options().timeout;
        if (timeout_s) {
          if (!(*timeout_s >= 0)) throw InvalidArgument("timeout must be >= 0 seconds, got " + std::to_string(*timeout_s));
          t = milliseconds(std::max<int64_t>(1, static_cast<int64_t>(*timeout_s * 1000.0)));
        }
        py::gil_scoped_release nogil;
        c.send_direct(peer, as_ptr(src), len, id, ver, offset, t);
      }, py::arg("peer"), py::arg("src"), py::arg("len"), py::arg("id"), py::arg("offset"), py::arg("version"),
         py::arg("timeout") = py::none())
      .def("irecv", [](C& c, int peer, uint32_t id, size_t offset, size_t len) {
        Request r;
        {
          py::gil_scoped_release nogil;
          r = c.irecv(peer, id, offset, len);
        }
        return make_request(std::move(r), py::none(), describe("receive from", peer, id, len), c);
      }, py::return_value_policy::take_ownership)
      .def("barrier", &C::barrier, py::call_guard<py::gil_scoped_release>())
      .def("close", &C::close, py::call_guard<py::gil_scoped_release>())
      .def("path_to", [](const C& c, int peer) { return std::string(to_string(c.path_to(peer))); })
      .def("shares_process", &C::shares_process)
      .def("completion_with", [](const C& c, int peer) {
        return std::string(to_string(c.completion_with(peer)));
      })
      .def("stats", [](const C& c) {
        CommStats s = c.stats();
        py::dict d;
        d["exports"] = s.exports;
        d["opens"] = s.opens;
        d["closes"] = s.closes;
        d["exports_fd"] = s.exports_fd;  // by file descriptor: VMM (expandable segments) on GPUs
        d["opens_fd"] = s.opens_fd;
        d["sends_done_seq"] = s.sends_done_seq;
        d["sends_ring"] = s.sends_ring;
        d["sends_relay"] = s.sends_relay;
        return d;
      });
}

}  // namespace peerlink::py_binding

PYBIND11_MODULE(_peerlink, m) {
  m.doc() = "Raw binding of the peerlink C++ library; use the `peerlink` package instead.";
  m.attr("HOST_DEVICE") = peerlink::kHostDevice;
  peerlink::py_binding::register_errors(m);
  peerlink::py_binding::register_comm(m);
  peerlink::py_binding::register_extras(m);
  peerlink::py_binding::register_collectives(m);
  peerlink::py_binding::register_stream(m);
}
