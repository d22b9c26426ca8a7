// Pieces of the `peerlink._peerlink` module, one registration function per source file.
#pragma once
#include <pybind11/pybind11.h>

namespace peerlink::py_binding {

void register_errors(pybind11::module_& m);       // module.cpp: exception classes + translator
void register_comm(pybind11::module_& m);         // module.cpp: Communicator, Request, Allocation
void register_extras(pybind11::module_& m);       // extras.cpp: GPU runtime helpers, DLPack reader
void register_collectives(pybind11::module_& m);  // collectives.cpp: allreduce when built with it
void register_stream(pybind11::module_& m);       // stream.cpp: stream-ordered send/recv, groups

}  // namespace peerlink::py_binding
