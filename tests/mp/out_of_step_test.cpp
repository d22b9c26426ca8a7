// After a barrier fails having published its arrival, the communicator refuses further barriers
// and collectives, and says why with bootstrap's reason: a barrier that timed out reports "timed
// out", not "interrupted" (CommImpl::check_usable). Host backend, two forked ranks.
#include <gtest/gtest.h>

#include <thread>

#include "peerlink/peerlink.h"
#include "support/mp.h"

using namespace peerlink;
using pltest::run_ranks;
using namespace std::chrono;

TEST(MpOutOfStep, TimedOutBarrierIsReportedAsTimedOut) {
  const std::string uid = pltest::unique_test_id("oos");
  std::string fails = run_ranks(2, [&](int rank) {
    Options o;
    o.timeout = milliseconds(rank == 0 ? 300 : 10000);
    Communicator comm(uid, rank, 2, kHostDevice, o);
    if (rank == 1) {
      std::this_thread::sleep_for(milliseconds(800));  // never joins rank 0's barrier
      return;
    }
    MP_CHECK_THROWS(comm.barrier(), TimeoutError, "barrier timed out");
    for (int k = 0; k < 2; ++k) {
      bool thrown = false;
      try {
        if (k == 0) comm.barrier();
        else allreduce(comm, nullptr, nullptr, 0, DataType::F32, ReduceOp::Sum);
      } catch (const Error& e) {
        thrown = true;
        const std::string what = e.what();
        MP_CHECK_MSG(what.find("timed out") != std::string::npos, what);
        MP_CHECK_MSG(what.find("interrupted") == std::string::npos, what);
      }
      MP_CHECK_MSG(thrown, (k == 0 ? "barrier" : "allreduce") << " after a timed-out barrier was accepted");
    }
  });
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}
