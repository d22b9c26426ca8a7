// VMM memory (cuMemCreate + cuMemMap, as PyTorch's expandable segments make it) published and sent
// across processes: exported chunk by chunk by file descriptor, imported and mapped back to back by
// the peer. Runs on the devices PEERLINK_TEST_DEVICES names ("0,0": two processes on one GPU,
// "0,1": one per GPU); skipped on the host backend (the default "-1").
#include <gtest/gtest.h>

#include <sstream>

#include "gpu/owners.h"
#include "gpu/runtime.h"
#include "gpu/vmm.h"
#include "peerlink/peerlink.h"
#include "support/device_pattern.h"
#include "support/mp.h"
#include "support/test_devices.h"

using namespace peerlink;
using pltest::run_ranks;
using namespace std::chrono;

namespace {

using pltest::device_of;
using pltest::test_devices;
#define REQUIRE_GPU_DEVICES()                                                          \
  if (device_of(0) < 0 || device_of(1) < 0)                                            \
  GTEST_SKIP() << "set PEERLINK_TEST_DEVICES to GPU ordinals, e.g. 0,1 (host backend now)"


// A VMM allocation owned by the test (3 chunks of the device's granularity, back to back).
struct Vmm {
  Vmm(int dev, int chunks, bool shareable) : dev(dev) {
    gpu::DeviceGuard g(dev);
    chunk = gpu::vmm_granularity(dev);
    bytes = chunk * chunks;
    p = static_cast<char*>(gpu::vmm_test_alloc(dev, chunk, chunks, shareable));
  }
  ~Vmm() {
    gpu::DeviceGuard g(dev);
    gpu::vmm_test_free(p, bytes);
  }
  int dev;
  size_t chunk = 0, bytes = 0;
  char* p = nullptr;
};

Options opts(DescriptorPassing m) {
  Options o;
  o.timeout = milliseconds(30000);
  o.fd_passing = m;
  return o;
}

class VmmContract : public testing::TestWithParam<DescriptorPassing> {};

// send_direct out of and into VMM memory: the receiver publishes a range that starts 100 bytes into
// its first chunk and ends inside its third (partial first and last chunk); then it frees the whole
// allocation, makes a new one (often at the same address) and publishes the next version, six
// times: the sender must open the new chunks every time, never write through an old mapping (the
// driver may give a new chunk the handle value of a freed one: the export keeps its handles).
TEST_P(VmmContract, SendDirectIntoAndOutOfVmmAndRepublishAfterRealloc) {
  REQUIRE_GPU_DEVICES();
  const std::string uid = pltest::unique_test_id("vmm");
  constexpr uint64_t kVersions = 6;
  std::string fails = run_ranks(2, [&](int rank) {
    const int dev = device_of(rank);
    Communicator comm(uid, rank, 2, dev, opts(GetParam()));
    if (rank == 1) {
      size_t len = 0;
      for (uint64_t v = 1; v <= kVersions; ++v) {
        Vmm m(dev, 3, true);
        len = 2 * m.chunk + 4096;
        comm.notify_ipc_buffer(0, 1, m.p + 100, len, v);
        comm.barrier();  // sender sends
        comm.barrier();
        MP_CHECK_MSG(pltest::check_on_device(dev, m.p + 100, len, v) == SIZE_MAX, "version " << v);
        comm.barrier();  // before the allocation goes
      }
      CommStats st = comm.stats();
      MP_CHECK_MSG(st.exports_fd == kVersions, "exports by fd " << st.exports_fd);
    } else {
      Vmm src(dev, 3, false);  // a source needs no export permission
      for (uint64_t v = 1; v <= kVersions; ++v) {
        comm.barrier();
        size_t len = 2 * src.chunk + 4096;
        pltest::put_on_device(dev, src.p + 7, len, v);
        comm.send_direct(1, src.p + 7, len, 1, v);
        comm.barrier();
        comm.barrier();
      }
      CommStats st = comm.stats();
      MP_CHECK_MSG(st.opens_fd == kVersions && st.closes >= 1, "opens by fd " << st.opens_fd << ", closes " << st.closes);
    }
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, VmmContract, testing::Values(DescriptorPassing::Auto, DescriptorPassing::Socket));

// VMM memory created without the POSIX file descriptor handle type cannot be shared: publishing it
// is an UnsupportedError naming the range and the reason, and nothing is half-published.
TEST(VmmContractErrors, MemoryWithoutExportPermissionIsUnsupported) {
  REQUIRE_GPU_DEVICES();
  const std::string uid = pltest::unique_test_id("vmme");
  std::string fails = run_ranks(2, [&](int rank) {
    const int dev = device_of(rank);
    Communicator comm(uid, rank, 2, dev, opts(DescriptorPassing::Auto));
    if (rank == 1) {
      Vmm m(dev, 2, false);
      MP_CHECK_THROWS(comm.notify_ipc_buffer(0, 1, m.p, m.bytes, 1), UnsupportedError, "cannot be shared",
                      "POSIX file descriptor");
    }
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
}

}  // namespace
