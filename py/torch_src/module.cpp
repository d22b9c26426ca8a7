// pybind11 module `peerlink._peerlink_torch`: the c10d backend class for peerlink.torch's creator
// function (which registers it with torch.distributed), and the build's torch version, which
// peerlink.torch compares with the running torch before it loads this module.
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <optional>
#include <string>

#include "process_group.h"

#ifndef PEERLINK_TORCH_VERSION
#error "PEERLINK_TORCH_VERSION (torch.__version__ at build time) must be defined by setup.py"
#endif

namespace py = pybind11;
using peerlink::pt::ProcessGroupPeerlink;

PYBIND11_MODULE(_peerlink_torch, m) {
  m.doc() = "peerlink's c10d backend and torch.ops.peerlink (use peerlink.torch)";
  m.attr("torch_version") = PEERLINK_TORCH_VERSION;
  py::class_<ProcessGroupPeerlink, c10d::Backend, c10::intrusive_ptr<ProcessGroupPeerlink>>(m, "ProcessGroupPeerlink")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const std::string& group_name,
                       const std::string& host_id, int64_t timeout_ms, const std::string& uid_prefix,
                       std::optional<peerlink::pt::BackendMaker> make_backend) {
             ProcessGroupPeerlink::Config cfg;
             cfg.group_name = group_name;
             cfg.host_id = host_id;
             cfg.timeout = std::chrono::milliseconds(timeout_ms);
             cfg.uid_prefix = uid_prefix;
             if (make_backend) cfg.make_backend = std::move(*make_backend);
             return c10::make_intrusive<ProcessGroupPeerlink>(store, rank, size, cfg);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("group_name"), py::arg("host_id"),
           py::arg("timeout_ms"), py::arg("uid_prefix") = "pt", py::arg("make_backend") = py::none(),
           py::call_guard<py::gil_scoped_release>(),
           "Collective over the group: exchanges host identities through the store. Communicators are "
           "created by each device kind's first call; a group spanning nodes needs make_backend(store, "
           "rank, size, device) -> a torch backend for the ranks between nodes.")
      .def_property_readonly("node_hosts", [](const ProcessGroupPeerlink& pg) { return pg.node_map().hosts; })
      .def_property_readonly("node_of_rank", [](const ProcessGroupPeerlink& pg) { return pg.node_map().node_of_rank; });
}
