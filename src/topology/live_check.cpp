// The live P2P check: drivers can claim peer access and still return wrong data, so before a pair
// is enabled a small real copy with a known pattern goes both ways and is compared byte by byte.
// Only src/gpu/runtime.h is used.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "common/format.h"
#include "common/log.h"
#include "gpu/owners.h"
#include "gpu/runtime.h"
#include "topology/policy.h"

namespace peerlink::topology {

namespace {

constexpr size_t kCheckBytes = size_t(256) << 10;  // big enough for several DMA bursts, cheap to copy

// Non-zero, position-dependent bytes (xorshift), different for each direction and pair.
std::vector<uint8_t> pattern(uint32_t seed) {
  std::vector<uint8_t> p(kCheckBytes);
  uint32_t x = seed * 2654435761u + 0x9E3779B9u;
  for (size_t i = 0; i < p.size(); ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = static_cast<uint8_t>((x & 0xFF) | 1);  // never zero, so untouched (zeroed) memory cannot pass
  }
  return p;
}

// One direction: pattern -> src (on src_dev) -> dst (on dst_dev) -> host, compared.
std::string one_way(int src_dev, void* src, int dst_dev, void* dst, uint32_t seed) {
  const std::vector<uint8_t> want = pattern(seed);
  std::vector<uint8_t> got(kCheckBytes, 0);
  {
    gpu::DeviceGuard g(dst_dev);
    gpu::memset_sync(dst, 0, kCheckBytes);
  }
  {
    gpu::DeviceGuard g(src_dev);
    gpu::memcpy_sync(src, want.data(), kCheckBytes);
    gpu::memcpy_sync(dst, src, kCheckBytes);  // the device-to-device copy under test
  }
  {
    gpu::DeviceGuard g(dst_dev);
    gpu::memcpy_sync(got.data(), dst, kCheckBytes);
  }
  for (size_t i = 0; i < kCheckBytes; ++i) {
    if (got[i] != want[i]) {
      return common::format("device {} -> device {}: byte {} of {} is 0x{:02x}, expected 0x{:02x}", src_dev, dst_dev, i,
                            kCheckBytes, got[i], want[i]);
    }
  }
  return "";
}

}  // namespace

// Every device switch is scoped (DeviceGuard) and the allocations are owned (freed on their
// device), so the caller's thread keeps its current device whatever fails.
std::string runtime_copy_check(int a, int b) {
  std::string err;
  try {
    gpu::DeviceAlloc pa = gpu::DeviceAlloc::create(a, kCheckBytes);
    gpu::DeviceAlloc pb = gpu::DeviceAlloc::create(b, kCheckBytes);
    err = one_way(a, pa.get(), b, pb.get(), static_cast<uint32_t>(a * 131 + b));
    if (err.empty()) err = one_way(b, pb.get(), a, pa.get(), static_cast<uint32_t>(b * 131 + a + 7));
  } catch (const std::exception& e) {
    err = common::format("device {} <-> device {}: {}", a, b, e.what());
  }
  return err;
}

LiveChecks runtime_live_checks() {
  LiveChecks c;
  c.can_access_peer = [](int a, int b) {
    try {
      return gpu::can_access_peer(a, b);
    } catch (const std::exception&) {
      return false;  // an error is a "no"
    }
  };
  c.copy_check = runtime_copy_check;
  return c;
}

}  // namespace peerlink::topology
