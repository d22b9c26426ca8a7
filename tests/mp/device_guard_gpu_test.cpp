// The device guard on GPUs: peerlink sets its communicator's device for each call and gives the
// caller's back, so a user who selects another device on the same thread (torch.cuda.set_device,
// cudaSetDevice) keeps it, and peerlink's memory still lands on the communicator's device.
// Runs on the devices PEERLINK_TEST_DEVICES names (as the contract suite: "0,0" two processes on
// one GPU, "0,1" one per GPU); skipped on the host backend (the default "-1").
#include <gtest/gtest.h>

#include <sstream>

#include "gpu/owners.h"
#include "gpu/runtime.h"
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

Options opts(Path path) {
  Options o;
  o.timeout = milliseconds(30000);
  o.path = path;
  o.relay_chunk_bytes = 1 << 20;
  o.stripe_threshold = 4 << 20;  // kLen is striped over two copy lanes (one by default)
  o.stripe_streams = 2;
  return o;
}


// One exchange through every kind of call, checking after each that `expect_current()` holds.
template <typename Check>
void exchange(const std::string& uid, int rank, Path path, Check&& same) {
  const int dev = device_of(rank), peer = 1 - rank;
  const size_t kBuf = 6 << 20, kLen = (5 << 20) + 3;
  {
    Communicator comm(uid, rank, 2, dev, opts(path));
    same("Communicator()");
    char* buf = static_cast<char*>(comm.alloc(kBuf));
    same("alloc");
    MP_CHECK_MSG(gpu::pointer_device(buf) == dev, "alloc landed on device " << gpu::pointer_device(buf) << ", not "
                                                                             << dev);
    char* src = static_cast<char*>(comm.alloc(kBuf));
    comm.notify_ipc_buffer(peer, 7, buf, kBuf, 1);
    same("notify_ipc_buffer");
    comm.wait_ipc_buffer(peer, 7, 1);
    same("wait_ipc_buffer");
    for (int k = 0; k < 3; ++k) {
      const size_t len = k == 0 ? 8 : k == 1 ? 100000 : kLen;  // kernel copy, copy engine, striped / relayed
      Request r = comm.irecv(peer, 7, 0, len);
      same("irecv");
      pltest::put_on_device(dev, src, len, uint64_t(rank) << 8 | k);
      Request s = comm.isend(peer, src, len, 7, 0, k == 1 ? 0 : 1);
      same("isend");
      s.wait();
      same("send wait");
      r.wait();
      same("recv wait");
      size_t bad = pltest::check_on_device(dev, buf, len, uint64_t(peer) << 8 | k);
      MP_CHECK_MSG(bad == SIZE_MAX, "message " << k << " (" << len << " bytes) wrong at byte " << bad);
      comm.barrier();
      same("barrier");
    }
    comm.free(src);
    same("free");
    comm.free(buf);
    comm.barrier();
  }
  same("~Communicator");
}

class ContractDeviceGuard : public testing::TestWithParam<Path> {};

// The user's thread has selected another device (the other GPU when there are two): after every
// peerlink call it is still current, and peerlink's allocations are on the communicator's device.
TEST_P(ContractDeviceGuard, UserDeviceRestoredAfterEveryCall) {
  REQUIRE_GPU_DEVICES();
  const std::string uid = pltest::unique_test_id("devguard");
  std::string fails = run_ranks(2, [&](int rank) {
    const int n = gpu::device_count();
    const int dev = device_of(rank);
    const int user = n >= 2 ? (dev + 1) % n : dev;
    gpu::set_device(user);  // what torch.cuda.set_device does
    exchange(uid, rank, GetParam(), [&](const char* call) {
      int cur = gpu::current_device();
      MP_CHECK_MSG(cur == user, "after " << call << " the current device is " << cur << ", the user set " << user);
    });
  }, milliseconds(120000));
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

// A thread that never selected a device: peerlink leaves it without one, and the process never
// gets a context on a GPU it does not use (restoring with cudaSetDevice(0) would create one on
// device 0 in every process of a rank on device 1). Both ranks on one device ("0,0") on a machine
// with more GPUs: with ranks on two devices, topology's live copy check of the pair touches both
// on purpose.
TEST_P(ContractDeviceGuard, NoContextOnOtherDevices) {
  REQUIRE_GPU_DEVICES();
  if (device_of(0) != device_of(1)) GTEST_SKIP() << "needs both ranks on one device (PEERLINK_TEST_DEVICES=0,0)";
  const std::string uid = pltest::unique_test_id("devctx");
  std::string fails = run_ranks(2, [&](int rank) {
    const int n = gpu::device_count();
    const int dev = device_of(rank);
    exchange(uid, rank, GetParam(), [&](const char*) {});
    for (int x = 0; x < n; ++x) {  // one GPU visible: nothing to check
      if (x == dev) continue;
      int active = gpu::context_active(x);
      MP_CHECK_MSG(active != 1, "rank " << rank << " on device " << dev << " has a context on device " << x);
    }
  }, milliseconds(120000));
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

// Collectives: the first allreduce sets up its state (allocations, events, mapped error word),
// later ones launch kernels; neither may leave the communicator's device current on the user's
// thread, and close() (the state's teardown) neither. The sums are checked, so the guard did not
// send the work to the wrong device.
TEST_P(ContractDeviceGuard, AllreduceRestoresUserDevice) {
  REQUIRE_GPU_DEVICES();
  if (GetParam() != Path::Auto) GTEST_SKIP() << "allreduce does not depend on the p2p path";
  const std::string uid = pltest::unique_test_id("devguard-ar");
  std::string fails = run_ranks(2, [&](int rank) {
    const int n = gpu::device_count();
    const int dev = device_of(rank);
    const int user = n >= 2 ? (dev + 1) % n : dev;
    gpu::set_device(user);
    auto same = [&](const char* call) {
      int cur = gpu::current_device();
      MP_CHECK_MSG(cur == user, "after " << call << " the current device is " << cur << ", the user set " << user);
    };
    {
      Communicator comm(uid, rank, 2, dev, opts(Path::Auto));
      gpu::StreamOwner stream = gpu::StreamOwner::create(dev);
      same("StreamOwner::create");
      for (size_t count : {size_t(4), size_t(1) << 20}) {  // one-shot LL and a larger algorithm
        float* buf = static_cast<float*>(comm.alloc(count * sizeof(float)));
        std::vector<float> h(count);
        for (size_t i = 0; i < count; ++i) h[i] = float((rank + 1) * (i % 7 + 1));
        {
          gpu::DeviceGuard g(dev);
          gpu::memcpy_sync(buf, h.data(), count * sizeof(float));
        }
        for (int k = 0; k < 2; ++k) {  // the first call of the communicator also sets up the state
          allreduce(comm, buf, buf, count, DataType::F32, ReduceOp::Sum, stream.get());
          same(k == 0 ? "allreduce (first)" : "allreduce");
          {
            gpu::DeviceGuard g(dev);
            gpu::stream_sync(stream.get());
            gpu::memcpy_sync(h.data(), buf, count * sizeof(float));
          }
          const float scale = k == 0 ? 3.0f : 6.0f;  // 1 + 2, then doubled by the second sum
          for (size_t i = 0; i < count; ++i)
            MP_CHECK_MSG(h[i] == scale * float(i % 7 + 1), "count " << count << " call " << k << ": element " << i
                                                                    << " is " << h[i]);
        }
        comm.free(buf);
        same("free");
      }
      comm.barrier();
    }
    same("~Communicator (collectives teardown)");
  }, milliseconds(120000));
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

INSTANTIATE_TEST_SUITE_P(Gpu, ContractDeviceGuard, testing::Values(Path::Auto, Path::Relay),
                         [](const testing::TestParamInfo<Path>& i) { return std::string(to_string(i.param)); });

}  // namespace
