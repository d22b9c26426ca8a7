// Regression: two communicators of one process whose first allreduce runs concurrently on two
// threads (one thread per rank, as NCCL programs and libnccl.so.2's group end drive them)
// deadlocked: the collectives setup held a process-wide mutex across its allgather, so rank 0's
// setup waited for rank 1's, which waited for the mutex.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "peerlink/peerlink.h"
#include "support/mp.h"

using namespace peerlink;

TEST(MpCollSetupThreads, TwoCommunicatorsOfOneProcessSetUpConcurrently) {
  const std::string uid = pltest::unique_test_id("collsetup");
  Options o;
  o.timeout = std::chrono::milliseconds(10000);
  float out[2][64];
  const auto err = pltest::run_thread_pair([&](int r) {
    Communicator c(uid, r, 2, kHostDevice, o);
    std::vector<float> in(64, static_cast<float>(r + 1));
    allreduce(c, in.data(), out[r], 64, DataType::F32, ReduceOp::Sum);
    c.barrier();
  });
  EXPECT_EQ(err[0], "");
  EXPECT_EQ(err[1], "");
  EXPECT_EQ(out[0][63], 3.0f);
  EXPECT_EQ(out[1][0], 3.0f);
}
