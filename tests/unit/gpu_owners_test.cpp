// What of the GPU shim is testable without a GPU: the owners' move semantics (released exactly
// once, whatever is moved where), the device guard's no-op for the host device, GpuError's message,
// and that a host-only build refuses GPU resources with UnsupportedError and holds nothing.
#include <gtest/gtest.h>

#include <vector>

#include "gpu/backend.h"
#include "gpu/gpu_error.h"
#include "gpu/owners.h"
#include "peerlink/errors.h"
#include "peerlink/peerlink.h"

using namespace peerlink;

namespace {

std::vector<void*> g_released;
void count_release(void* p) { g_released.push_back(p); }
using Counted = gpu::DeviceBound<count_release>;  // dev -1: released without a device guard

void* handle(int i) { return reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 + i)); }

}  // namespace

TEST(BackendOwners, ReleasedOnceOnScopeExit) {
  g_released.clear();
  {
    Counted a(-1, handle(1));
    EXPECT_TRUE(a);
    EXPECT_EQ(a.get(), handle(1));
  }
  EXPECT_EQ(g_released, std::vector<void*>{handle(1)});
  { Counted empty; }  // nothing held: nothing released
  EXPECT_EQ(g_released.size(), 1u);
}

TEST(BackendOwners, MoveTransfersOwnership) {
  g_released.clear();
  {
    Counted a(-1, handle(1));
    Counted b(std::move(a));
    EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): the moved-from owner is empty
    EXPECT_EQ(b.get(), handle(1));
    EXPECT_TRUE(g_released.empty());
    std::vector<Counted> v;
    v.push_back(std::move(b));
    for (int i = 2; i < 40; ++i) v.emplace_back(-1, handle(i));  // reallocations move, never release
    EXPECT_TRUE(g_released.empty());
  }
  EXPECT_EQ(g_released.size(), 39u);
}

TEST(BackendOwners, MoveAssignReleasesTheOldHandle) {
  g_released.clear();
  Counted a(-1, handle(1)), b(-1, handle(2));
  a = std::move(b);
  EXPECT_EQ(g_released, std::vector<void*>{handle(1)});
  EXPECT_EQ(a.get(), handle(2));
  Counted& self = a;
  a = std::move(self);  // self-move keeps the handle
  EXPECT_EQ(a.get(), handle(2));
  EXPECT_EQ(g_released.size(), 1u);
  void* p = a.release();  // given up: never released by the owner
  EXPECT_EQ(p, handle(2));
  a.reset();
  EXPECT_EQ(g_released.size(), 1u);
}

TEST(BackendOwners, HostDeviceGuardIsANoOp) {
  gpu::DeviceGuard g(kHostDevice);
  EXPECT_FALSE(g.switched());
}

TEST(BackendOwners, HostOnlyBuildRefusesGpuResources) {
  if (gpu::compiled_with_gpu()) GTEST_SKIP() << "host-only build behaviour";
  EXPECT_THROW(gpu::DeviceGuard g(0), UnsupportedError);
  EXPECT_THROW(gpu::StreamOwner::create(0), UnsupportedError);
  EXPECT_THROW(gpu::EventOwner::create(0), UnsupportedError);
  EXPECT_THROW(gpu::MappedHostAlloc::create(0, 64), UnsupportedError);
  unsigned char h[gpu::kIpcHandleBytes] = {};
  EXPECT_THROW(gpu::IpcMapping::open(0, h), UnsupportedError);
  // The host backend's worker binding is a no-op (the transport calls it on every backend).
  auto be = gpu::make_backend(kHostDevice, "pl_owners_test_");
  be->bind_worker_thread();
}

TEST(BackendGpuError, MessageNamesCallErrorAndDevice) {
  std::string m = gpu::format_gpu_error("cudaMalloc", 2, "cudaErrorMemoryAllocation", "out of memory", 1);
  EXPECT_EQ(m, "cudaMalloc failed on device 1: out of memory (cudaErrorMemoryAllocation, code 2)");
  std::string d = gpu::format_gpu_error("cuStreamWriteValue64", 700, nullptr, nullptr, -1);
  EXPECT_EQ(d, "cuStreamWriteValue64 failed on an unknown device: unknown error (code 700)");
  // An initialization error names its usual cause in a job of several processes.
  std::string i = gpu::format_gpu_error("cuDeviceGet", 3, nullptr, "initialization error", -1);
  EXPECT_EQ(i.rfind("cuDeviceGet failed on an unknown device: initialization error (code 3); ", 0), 0u) << i;
  EXPECT_NE(i.find("forked after its parent used the GPU"), std::string::npos) << i;
}

TEST(BackendGpuError, IsAnErrorWithCodeAndCall) {
  try {
    throw gpu::make_gpu_error("hipMemcpy", 1, "hipErrorInvalidValue", "invalid argument", 0);
  } catch (const Error& e) {
    auto* g = dynamic_cast<const GpuError*>(&e);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->code(), 1);
    EXPECT_EQ(g->call(), "hipMemcpy");
    EXPECT_NE(std::string(e.what()).find("device 0"), std::string::npos);
  }
}
