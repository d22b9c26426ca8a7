// Test payloads in device memory: a tagged pattern (support/mp.h) written to or checked in `n`
// bytes of device `dev`, staged through the host with the device guarded (the calling thread's
// current device is left as it was).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpu/owners.h"
#include "gpu/runtime.h"
#include "support/mp.h"

namespace pltest {

inline void put_on_device(int dev, void* dst, size_t n, uint64_t tag) {
  std::vector<char> h(n);
  fill_pattern(h.data(), n, tag);
  peerlink::gpu::DeviceGuard g(dev);
  peerlink::gpu::memcpy_sync(dst, h.data(), n);
}

// SIZE_MAX when every byte matches, else the first offset that does not.
inline size_t check_on_device(int dev, const void* src, size_t n, uint64_t tag) {
  std::vector<char> h(n);
  peerlink::gpu::DeviceGuard g(dev);
  peerlink::gpu::memcpy_sync(h.data(), src, n);
  return check_pattern(h.data(), n, tag);
}

}  // namespace pltest
