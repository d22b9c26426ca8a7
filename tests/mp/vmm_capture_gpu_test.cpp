// Publishing and waiting for a buffer while the caller's stream is being captured into a CUDA/HIP
// graph: both must work and leave the capture valid. The first publication of
// an allocation exports it (cudaIpcGetMemHandle, or for VMM memory cuMemRetainAllocationHandle +
// cuMemExportToShareableHandle) and the first wait maps it (cudaIpcOpenMemHandle, or fd import +
// cuMemMap): none of that is stream work, and the backend runs it in the relaxed capture mode
// (gpu/vmm.h RelaxedCaptureMode), so the capture is not invalidated. The captured graph is then
// launched and its own copy checked, and a send into the buffer published during the capture lands.
// Runs on PEERLINK_TEST_DEVICES (e.g. 0,1 or 0,0); skipped on the host backend.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "gpu/owners.h"
#include "gpu/runtime.h"
#include "gpu/vmm.h"
#include "peerlink/peerlink.h"
#include "support/device_pattern.h"
#include "support/mp.h"
#include "support/test_devices.h"

using namespace peerlink;
using pltest::device_of;
using pltest::run_ranks;

namespace {


// Captures a device-to-device copy on a new stream around `during` (which runs while the stream is
// being captured), ends the capture (throws if it was invalidated), replays it and checks the copy.
void captured(Communicator& comm, int dev, const std::function<void()>& during) {
  const size_t n = 4096;
  char* a = static_cast<char*>(comm.alloc(n));
  char* b = static_cast<char*>(comm.alloc(n));
  pltest::put_on_device(dev, a, n, 77);
  pltest::put_on_device(dev, b, n, 78);
  gpu::StreamOwner s = gpu::StreamOwner::create(dev);
  gpu::GraphExec g = nullptr;
  {
    gpu::DeviceGuard dg(dev);
    gpu::stream_begin_capture(s.get());
    gpu::memcpy_async(b, a, n, s.get());
    try {
      during();
    } catch (...) {
      try {
        gpu::graph_destroy(gpu::stream_end_capture(s.get()));
      } catch (...) {
      }
      throw;
    }
    MP_CHECK_MSG(gpu::stream_is_capturing(s.get()), "the stream left capture mode during the call");
    g = gpu::stream_end_capture(s.get());  // throws when the call invalidated the capture
    gpu::graph_launch(g, s.get());
    gpu::stream_sync(s.get());
    gpu::graph_destroy(g);
  }
  MP_CHECK_MSG(pltest::check_on_device(dev, b, n, 77) == SIZE_MAX, "the captured copy did not run on replay");
  comm.free(a);
  comm.free(b);
}

class VmmCapture : public testing::TestWithParam<bool> {};  // true: VMM memory; false: cudaMalloc

TEST_P(VmmCapture, PublishAndWaitWhileTheCallersStreamIsCaptured) {
  if (device_of(0) < 0 || device_of(1) < 0)
    GTEST_SKIP() << "set PEERLINK_TEST_DEVICES to GPU ordinals, e.g. 0,1 (host backend now)";
  const bool vmm = GetParam();
  const std::string uid = pltest::unique_test_id("vmmcap");
  std::string fails = run_ranks(2, [&](int rank) {
    const int dev = device_of(rank);
    Options o;
    o.timeout = std::chrono::milliseconds(30000);
    Communicator comm(uid, rank, 2, dev, o);
    size_t chunk = 0, bytes = 0;
    char* mem = nullptr;
    if (vmm) {
      gpu::DeviceGuard g(dev);
      chunk = gpu::vmm_granularity(dev);
      bytes = 3 * chunk;
      mem = static_cast<char*>(gpu::vmm_test_alloc(dev, chunk, 3, true));
    } else {
      bytes = 3 << 20;
      mem = static_cast<char*>(comm.alloc(bytes));
    }
    const size_t len = bytes - 200;
    if (rank == 1) {
      pltest::put_on_device(dev, mem, bytes, 5);  // anything but the payload
      captured(comm, dev, [&] { comm.notify_ipc_buffer(0, 1, mem + 100, len, 1); });  // first export
      comm.barrier();  // the sender sends
      comm.barrier();
      MP_CHECK_MSG(pltest::check_on_device(dev, mem + 100, len, 9) == SIZE_MAX, "payload sent into the buffer published in capture");
      CommStats st = comm.stats();
      MP_CHECK_MSG(st.exports_fd == (vmm ? 1u : 0u), "exports by descriptor " << st.exports_fd);
    } else {
      captured(comm, dev, [&] { comm.wait_ipc_buffer(1, 1, 1); });  // first map of the peer's buffer
      CommStats st = comm.stats();
      MP_CHECK_MSG(st.opens == 1, "the wait in capture did not map the buffer (opens " << st.opens << ")");
      comm.barrier();
      pltest::put_on_device(dev, mem, len, 9);
      comm.send_direct(1, mem, len, 1, 1);
      comm.barrier();
    }
    comm.barrier();  // before the memory goes
    if (vmm) {
      gpu::DeviceGuard g(dev);
      gpu::vmm_test_free(mem, bytes);
    } else {
      comm.free(mem);
    }
  });
  EXPECT_EQ(fails, "");
}

INSTANTIATE_TEST_SUITE_P(Memory, VmmCapture, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool>& i) { return i.param ? "Vmm" : "CudaMalloc"; });

}  // namespace
