// GPU runtime helpers and a DLPack reader for the Python layer. The package never links torch or
// CuPy: it reads addresses from __cuda_array_interface__ / __array_interface__ / DLPack and orders
// work through raw stream handles, which the library (peerlink/device.h) can synchronize.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "bindings.h"
#include "peerlink/device.h"
#include "peerlink/errors.h"
#include "peerlink/multinode.h"

namespace py = pybind11;

namespace peerlink::py_binding {
namespace {

// DLPack 0.x ABI (the "dltensor" capsule every producer returns when the consumer passes no
// max_version). Declared here so the package needs no dlpack header.
struct DLDevice { int32_t device_type; int32_t device_id; };
struct DLDataType { uint8_t code; uint8_t bits; uint16_t lanes; };
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; NULL = compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};

// Reads a "dltensor" capsule without consuming it (the capsule's destructor still releases the
// producer's tensor). Returns a dict the Python side validates: address, nbytes, contiguous,
// dtype code/bits/lanes, device type/id.
py::dict dlpack_info(py::capsule cap) {
  if (std::string(cap.name() ? cap.name() : "") != "dltensor")
    throw InvalidArgument(std::string("DLPack capsule named '") + (cap.name() ? cap.name() : "") +
                          "' (expected an unconsumed 'dltensor')");
  auto* m = cap.get_pointer<DLManagedTensor>();
  const DLTensor& t = m->dl_tensor;
  int64_t numel = 1;
  for (int i = 0; i < t.ndim; ++i) numel *= t.shape[i];
  bool contiguous = true;
  if (t.strides && numel > 1) {
    int64_t expect = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && t.strides[i] != expect) contiguous = false;
      expect *= t.shape[i];
    }
  }
  const uint64_t bits = uint64_t(t.dtype.bits) * t.dtype.lanes;
  py::dict d;
  d["address"] = reinterpret_cast<uintptr_t>(static_cast<char*>(t.data) + t.byte_offset);
  d["numel"] = numel;
  d["bits"] = bits;
  d["nbytes"] = bits % 8 == 0 ? numel * int64_t(bits / 8) : int64_t(-1);
  d["code"] = int(t.dtype.code);
  d["contiguous"] = contiguous;
  d["device_type"] = t.device.device_type;
  d["device_id"] = t.device.device_id;
  py::list shape;
  for (int i = 0; i < t.ndim; ++i) shape.append(t.shape[i]);
  d["shape"] = py::tuple(shape);
  return d;
}

}  // namespace

void register_extras(py::module_& m) {
  m.def("runtime_name", [] { return std::string(device::runtime_name()); },
        "GPU runtime the library was built with: 'cuda', 'hip' or 'none'.");
  m.def("device_count", &device::count, "GPUs visible to the library (0 without a driver).");
  // Waits for all work on a raw stream handle (cudaStream_t / hipStream_t as an integer; 1 and 2
  // are the legacy and per-thread default streams, as in __cuda_array_interface__).
  m.def("stream_sync", [](uintptr_t stream) {
    if (!device::compiled_with_gpu()) return;
    py::gil_scoped_release nogil;
    device::stream_sync(reinterpret_cast<device::Stream>(stream));
  });
  m.def("is_device_pointer", [](uintptr_t p) { return device::is_device_pointer(reinterpret_cast<void*>(p)); });
  m.def("dlpack_info", &dlpack_info);
  // Node identity (PEERLINK_HOSTID, else NCCL_HOSTID, else hostname + boot id) and ids that carry it.
  m.def("make_unique_id", [] { return make_unique_id(Options::from_env()); },
        "A fresh Communicator unique id that names this node: a rank elsewhere fails at once.");
  m.def("host_identity", [] {
    Options o = Options::from_env();
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(host_id(o)));
    return py::make_tuple(std::string(hex), host_name(o), static_cast<int64_t>(o.timeout.count()));
  }, "(node id as 16 hex digits, node name, default timeout in ms) of this process.");
}

}  // namespace peerlink::py_binding
