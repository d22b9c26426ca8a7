// allreduce for Python. Collectives are a separate layer of the library that may be absent (an
// older library, or a build without it): the entry points are declared weak, so the module still
// loads and comm.allreduce raises UnsupportedError instead of failing at import.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "bindings.h"
#include "peerlink/peerlink.h"

namespace py = pybind11;

#if __has_include("peerlink/collectives.h")
namespace peerlink {
void allreduce(Communicator& comm, const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
               ReduceOp op, void* stream) __attribute__((weak));
void allreduce_check(Communicator& comm) __attribute__((weak));
void all_gather(Communicator&, const void*, void*, size_t, DataType, void*) __attribute__((weak));
void reduce_scatter(Communicator&, const void*, void*, size_t, DataType, ReduceOp, void*) __attribute__((weak));
void broadcast(Communicator&, const void*, void*, size_t, DataType, int, void*) __attribute__((weak));
void reduce(Communicator&, const void*, void*, size_t, DataType, ReduceOp, int, void*) __attribute__((weak));
void all_to_all(Communicator&, const void*, void*, size_t, DataType, void*) __attribute__((weak));
void all_to_all_v(Communicator&, const void*, const size_t*, const size_t*, void*, const size_t*, const size_t*,
                  DataType, void*) __attribute__((weak));
uint64_t register_window(Communicator&, void*, size_t) __attribute__((weak));
void allreduce_add_rmsnorm(Communicator&, const void*, const void*, const void*, void*, void*, size_t, size_t, DataType,
                           float, float, void*) __attribute__((weak));
void allreduce_add_rmsnorm_fp8(Communicator&, const void*, const void*, const void*, void*, void*, void*, const float*,
                               size_t, size_t, DataType, float, float, void*) __attribute__((weak));
void deregister_window(Communicator&, uint64_t) __attribute__((weak));
}  // namespace peerlink
#define PEERLINK_PY_HAVE_COLLECTIVES_HEADER 1
#else
#define PEERLINK_PY_HAVE_COLLECTIVES_HEADER 0
#endif

namespace peerlink::py_binding {

#if PEERLINK_PY_HAVE_COLLECTIVES_HEADER
namespace {

DataType dtype_of(const std::string& s) {
  if (s == "float32") return DataType::F32;
  if (s == "float16") return DataType::F16;
  if (s == "bfloat16") return DataType::BF16;
  if (s == "float64") return DataType::F64;
  if (s == "int32") return DataType::I32;
  if (s == "int64") return DataType::I64;
  throw InvalidArgument("allreduce: dtype " + s +
                        " is not supported (float32, float16, bfloat16, float64, int32, int64)");
}

ReduceOp op_of(const std::string& s) {
  if (s == "sum") return ReduceOp::Sum;
  if (s == "max") return ReduceOp::Max;
  if (s == "min") return ReduceOp::Min;
  if (s == "prod" || s == "product") return ReduceOp::Prod;
  if (s == "avg" || s == "mean") return ReduceOp::Avg;
  throw InvalidArgument("allreduce: op '" + s + "' is not one of sum, max, min, prod, avg");
}

bool linked() { return &peerlink::allreduce != nullptr; }

}  // namespace
#endif

void register_collectives(py::module_& m) {
#if PEERLINK_PY_HAVE_COLLECTIVES_HEADER
  m.attr("has_collectives") = linked();
  // In place: data is both input and output. stream: raw handle (0 = legacy default stream);
  // ignored on the host backend, where the call is synchronous.
  m.def("allreduce", [](Communicator& c, uintptr_t data, size_t count, const std::string& dtype,
                        const std::string& op, uintptr_t stream) {
    if (!linked()) throw UnsupportedError("allreduce: the peerlink library has no collectives");
    DataType t = dtype_of(dtype);
    ReduceOp o = op_of(op);
    py::gil_scoped_release nogil;
    void* p = reinterpret_cast<void*>(data);
    peerlink::allreduce(c, p, p, count, t, o, reinterpret_cast<void*>(stream));
  });
  m.def("allreduce_check", [](Communicator& c) {
    if (!linked() || &peerlink::allreduce_check == nullptr)
      throw UnsupportedError("allreduce_check: the peerlink library has no collectives");
    py::gil_scoped_release nogil;
    peerlink::allreduce_check(c);
  });
  // The other collectives: kind names the function; counts in elements (collectives.h). On GPUs
  // they are enqueued on `stream` and return at once; the host backend is synchronous.
  m.def("has_collective", [](const std::string& kind) {
    if (kind == "all_gather") return &peerlink::all_gather != nullptr;
    if (kind == "reduce_scatter") return &peerlink::reduce_scatter != nullptr;
    if (kind == "broadcast") return &peerlink::broadcast != nullptr;
    if (kind == "reduce") return &peerlink::reduce != nullptr;
    if (kind == "all_to_all") return &peerlink::all_to_all != nullptr;
    if (kind == "all_to_all_v") return &peerlink::all_to_all_v != nullptr;
    return false;
  });
  m.def("collective", [](Communicator& c, const std::string& kind, uintptr_t send, uintptr_t recv, size_t count,
                         const std::string& dtype, const std::string& op, int root, uintptr_t stream) {
    DataType t = dtype_of(dtype);
    ReduceOp o = op_of(op);
    auto s = reinterpret_cast<const void*>(send);
    auto r = reinterpret_cast<void*>(recv);
    auto st = reinterpret_cast<void*>(stream);
    auto missing = [&] { return UnsupportedError(kind + ": the peerlink library has no such collective"); };
    if (kind == "all_gather") {
      if (!&peerlink::all_gather) throw missing();
      py::gil_scoped_release nogil;
      return peerlink::all_gather(c, s, r, count, t, st);
    }
    if (kind == "reduce_scatter") {
      if (!&peerlink::reduce_scatter) throw missing();
      py::gil_scoped_release nogil;
      return peerlink::reduce_scatter(c, s, r, count, t, o, st);
    }
    if (kind == "broadcast") {
      if (!&peerlink::broadcast) throw missing();
      py::gil_scoped_release nogil;
      return peerlink::broadcast(c, s, r, count, t, root, st);
    }
    if (kind == "reduce") {
      if (!&peerlink::reduce) throw missing();
      py::gil_scoped_release nogil;
      return peerlink::reduce(c, s, r, count, t, o, root, st);
    }
    if (kind == "all_to_all") {
      if (!&peerlink::all_to_all) throw missing();
      py::gil_scoped_release nogil;
      return peerlink::all_to_all(c, s, r, count, t, st);
    }
    throw InvalidArgument("collective: unknown kind '" + kind + "'");
  });
  m.def("all_to_all_v", [](Communicator& c, uintptr_t send, std::vector<size_t> sc, std::vector<size_t> sd,
                           uintptr_t recv, std::vector<size_t> rc, std::vector<size_t> rd, const std::string& dtype,
                           uintptr_t stream) {
    if (!&peerlink::all_to_all_v) throw UnsupportedError("all_to_all_v: the peerlink library has no such collective");
    const size_t n = static_cast<size_t>(c.world_size());
    if (sc.size() != n || sd.size() != n || rc.size() != n || rd.size() != n)
      throw InvalidArgument("all_to_all_v: split lists must have world_size (" + std::to_string(n) +
                            ") entries; got " + std::to_string(sc.size()) + "/" + std::to_string(sd.size()) + "/" +
                            std::to_string(rc.size()) + "/" + std::to_string(rd.size()));
    DataType t = dtype_of(dtype);
    py::gil_scoped_release nogil;
    peerlink::all_to_all_v(c, reinterpret_cast<const void*>(send), sc.data(), sd.data(), reinterpret_cast<void*>(recv),
                           rc.data(), rd.data(), t, reinterpret_cast<void*>(stream));
  });
  // The fused allreduce + residual add + RMSNorm (peerlink/fused.h); quant_out != 0: the FP8 form
  // (norm_out may then be 0). Addresses of the caller's buffers; tokens x hidden elements of dtype.
  m.def("allreduce_add_rmsnorm", [](Communicator& c, uintptr_t input, uintptr_t residual_in, uintptr_t weight,
                                    uintptr_t norm_out, uintptr_t residual_out, uintptr_t quant_out, uintptr_t scale,
                                    size_t tokens, size_t hidden, const std::string& dtype, float eps,
                                    float weight_bias, uintptr_t stream) {
    const bool fp8 = quant_out != 0;
    if (fp8 ? !&peerlink::allreduce_add_rmsnorm_fp8 : !&peerlink::allreduce_add_rmsnorm)
      throw UnsupportedError("allreduce_add_rms_norm: the peerlink library has no fused epilogue");
    DataType t = dtype_of(dtype);
    auto p = [](uintptr_t a) { return reinterpret_cast<void*>(a); };
    py::gil_scoped_release nogil;
    if (fp8)
      peerlink::allreduce_add_rmsnorm_fp8(c, p(input), p(residual_in), p(weight), p(norm_out), p(residual_out),
                                          p(quant_out), reinterpret_cast<const float*>(scale), tokens, hidden, t, eps,
                                          weight_bias, p(stream));
    else
      peerlink::allreduce_add_rmsnorm(c, p(input), p(residual_in), p(weight), p(norm_out), p(residual_out), tokens,
                                      hidden, t, eps, weight_bias, p(stream));
  });
  // Registered windows (peerlink/windows.h): collective; the memory stays the caller's.
  m.def("register_window", [](Communicator& c, uintptr_t ptr, size_t nbytes) {
    if (!&peerlink::register_window) throw UnsupportedError("register_window: the peerlink library has no windows");
    py::gil_scoped_release nogil;
    return peerlink::register_window(c, reinterpret_cast<void*>(ptr), nbytes);
  });
  m.def("deregister_window", [](Communicator& c, uint64_t id) {
    if (!&peerlink::deregister_window) throw UnsupportedError("deregister_window: the peerlink library has no windows");
    py::gil_scoped_release nogil;
    peerlink::deregister_window(c, id);
  });
#else
  m.attr("has_collectives") = false;
  m.def("has_collective", [](const std::string&) { return false; });
  m.def("allreduce", [](py::args, py::kwargs) -> void {
    throw UnsupportedError("allreduce: peerlink was built without include/peerlink/collectives.h");
  });
  m.def("allreduce_check", [](py::args, py::kwargs) -> void {
    throw UnsupportedError("allreduce_check: peerlink was built without collectives");
  });
#endif
}

}  // namespace peerlink::py_binding
