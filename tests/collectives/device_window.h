// A registered window over device memory for the multi-process GPU tests of the zero-copy paths
// (coll_zc_gpu_test.cpp, allreduce_zc_gpu_test.cpp): from peerlink::device::alloc (plain cudaMalloc)
// or Communicator::alloc, deregistered and freed on scope exit.
#pragma once
#include <cstddef>
#include <cstdint>

#include "peerlink/device.h"
#include "peerlink/peerlink.h"
#include "peerlink/windows.h"

namespace pltest::coll {

// A registered window over `bytes` of device memory, from device::alloc or Communicator::alloc.
struct DeviceWindow {
  peerlink::Communicator& comm;
  bool from_comm;
  size_t bytes;
  char* base;
  uint64_t id = 0;
  DeviceWindow(peerlink::Communicator& c, bool use_comm_alloc, size_t n)
      : comm(c), from_comm(use_comm_alloc), bytes(n),
        base(static_cast<char*>(use_comm_alloc ? c.alloc(n) : peerlink::device::alloc(n))) {
    id = peerlink::register_window(comm, base, bytes);
  }
  ~DeviceWindow() {
    try {
      if (id) peerlink::deregister_window(comm, id);
    } catch (...) {  // a failed test reports its own error
    }
    if (from_comm) comm.free(base);
    else peerlink::device::free(base);
  }
  DeviceWindow(const DeviceWindow&) = delete;
  DeviceWindow& operator=(const DeviceWindow&) = delete;
};

}  // namespace pltest::coll
