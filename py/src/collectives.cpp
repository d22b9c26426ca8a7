// allreduce for Python. Collectives are a separate layer of the library that may be absent (an
// older library, or a build without it): the entry points are declared weak, so the module still
// loads and comm.allreduce raises UnsupportedError instead of failing at import.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "bindings.h"
#include "peerlink/peerlink.h"

namespace py = pybind11;

#if __has_include("peerlink/collectives.h")
namespace peerlink {
void allreduce(Communicator& comm, const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
               ReduceOp op, void* stream) __attribute__((weak));
void allreduce_check(Communicator& comm) __attribute__((weak));
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
  throw InvalidArgument("allreduce: op '" + s + "' is not one of sum, max, min, prod");
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
#else
  m.attr("has_collectives") = false;
  m.def("allreduce", [](py::args, py::kwargs) -> void {
    throw UnsupportedError("allreduce: peerlink was built without include/peerlink/collectives.h");
  });
  m.def("allreduce_check", [](py::args, py::kwargs) -> void {
    throw UnsupportedError("allreduce_check: peerlink was built without collectives");
  });
#endif
}

}  // namespace peerlink::py_binding
