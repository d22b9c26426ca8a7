// Stream-ordered send/recv on GPUs, failures: mismatched lengths, a stalled peer, a killed peer
// (2 ranks, device = rank; correctness is in stream_p2p_gpu_test.cpp). Runs only when
// PEERLINK_TEST_GPUS >= 2:
//   PEERLINK_TEST_GPUS=2 build-cuda/bin/peerlink_tests --gtest_filter='StreamGpu*'
// The parent never touches the GPU runtime before forking. Payloads are verified on the host.
#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include "stream_gpu_harness.h"

using namespace pltest;
using namespace pltest::stream_gpu;
using namespace peerlink;
namespace gpu = peerlink::gpu;
using std::chrono::milliseconds;

// NCCL form with different lengths on the two sides: the receiver reports InvalidArgument (nothing
// hangs), and the pair is stopped on both sides (the sender's next call reports it).
TEST(StreamGpu, RawLengthMismatchStopsPair) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sg-rawlen");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts(1500));
    Dev src(4096), dst(4096);
    comm.barrier();
    gpu::Stream s = gpu::stream_create();
    src.fill(9);
    if (rank == 0) {
      comm.send(1, src.p, 100, s);  // rank 1 expects 200 bytes
      gpu::stream_sync(s);
      comm.barrier();  // 1: rank 1 saw the mismatch (and stopped the pair)
      comm.send(1, src.p, 8, s);
      gpu::stream_sync(s);
      MP_CHECK_THROWS(poll(comm), Error, "stopped");
      comm.barrier();  // 2
    } else {
      comm.recv(0, dst.p, 200, s);
      gpu::stream_sync(s);
      MP_CHECK_THROWS(poll(comm), InvalidArgument, "different length");
      comm.barrier();  // 1
      comm.barrier();  // 2
    }
    gpu::stream_destroy(s);
  }, milliseconds(120000));
  EXPECT_EQ(fail, "");
}

// Failures: a mismatched published-form message (InvalidArgument on the receiver's next call,
// nothing written, the channel still works) and a stalled peer (the device wait ends at the
// timeout: TimeoutError) — the GPU never hangs.
TEST(StreamGpu, MismatchAndStall) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sg-fail");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts(1500));
    Dev src(4096), dst(4096), pub(4096);
    comm.notify_ipc_buffer(1 - rank, 4, pub.p, 4096, 1);
    comm.barrier();
    gpu::Stream s = gpu::stream_create();
    src.fill(7);
    if (rank == 0) {
      comm.send(1, src.p, 100, 4, 0, 1, s);  // rank 1 expects 200 bytes
      comm.send(1, src.p, 64, 4, 0, 1, s);
      gpu::stream_sync(s);
      comm.barrier();  // 1
      comm.recv(1, dst.p, 64, s);  // rank 1 stays alive but sends nothing
      gpu::stream_sync(s);         // ends after the 1.5 s device timeout
      // Seen without a call of this thread (a watchdog's ncclCommGetAsyncError), and not cleared.
      std::string other;
      std::thread([&] {
        try {
          comm.check_async_error();
          other = "no error";
        } catch (const TimeoutError& e) {
          other = e.what();
        } catch (const std::exception& e) {
          other = std::string("wrong type: ") + e.what();
        }
      }).join();
      MP_CHECK(other.find("rank 1") != std::string::npos);
      MP_CHECK_THROWS(comm.check_async_error(), TimeoutError, "rank 1");
      MP_CHECK_THROWS(poll(comm), TimeoutError, "rank 1");
      MP_CHECK_THROWS(comm.check_async_error(), TimeoutError, "rank 1");
      MP_CHECK_THROWS(comm.send(1, src.p, 8, s), TimeoutError, "rank 1");  // the pair stays broken
      comm.barrier();  // 2
    } else {
      comm.recv(0, 4, 0, 200, s);
      gpu::stream_sync(s);
      comm.check_async_error();  // a mismatch is reported by the next call only: the pair stays usable
      MP_CHECK_THROWS(poll(comm), InvalidArgument, "nothing was written");
      MP_CHECK(pub.zero());
      comm.recv(0, 4, 0, 64, s);
      gpu::stream_sync(s);
      poll(comm);
      MP_CHECK(pub.check(0, 64, 7) == SIZE_MAX);
      comm.barrier();  // 1
      comm.barrier();  // 2
    }
    gpu::stream_destroy(s);
  }, milliseconds(120000));
  EXPECT_EQ(fail, "");
}

// A peer killed while this rank's recv kernel waits for it: the kernel ends at the device timeout,
// the next call reports PeerLostError.
TEST(StreamGpu, PeerKilled) {
  REQUIRE_GPUS();
  std::string uid = unique_test_id("sg-kill");
  std::string fail = run_ranks(2, [&](int rank) {
    gpu::set_device(pltest::gpu_test_device(rank));
    Communicator comm(uid, rank, 2, pltest::gpu_test_device(rank), opts(1500));
    Dev dst(4096);
    gpu::Stream s = gpu::stream_create();
    poll(comm);      // both engines set up
    comm.barrier();  // 1
    if (rank == 0) {
      comm.recv(1, dst.p, 64, s);
      comm.barrier();  // 2
      gpu::stream_sync(s);
      MP_CHECK_THROWS(comm.check_async_error(), PeerLostError, "rank 1");
      MP_CHECK_THROWS(poll(comm), PeerLostError, "rank 1");
      MP_CHECK_THROWS(comm.recv(1, dst.p, 64, s), PeerLostError, "rank 1");
      MP_CHECK(dst.zero());
    } else {
      comm.barrier();  // 2
      raise(SIGKILL);
    }
  }, milliseconds(120000), {1});
  EXPECT_EQ(fail, "");
}
