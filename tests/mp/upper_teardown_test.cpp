// close() destroys the upper layers' state (collectives, the stream engine) after marking the
// communicator closed; their destructors must still free their memory and release their peer
// mappings through the services (not have backend() throw "closed" and the free swallowed,
// leaving the memory to the transport's teardown). Fork-based, host backend.
#include <gtest/gtest.h>

#include <atomic>

#include "common/shm_segment.h"
#include "gpu/backend.h"
#include "peerlink/peerlink.h"
#include "support/mp.h"
#include "transport/services.h"

using namespace peerlink;
using namespace std::chrono;
using pltest::run_ranks;

namespace {

// An upper layer's state: owns an allocation of its own and a mapping of the peer's.
struct Probe final : detail::UpperState {
  detail::CommServices* svc = nullptr;
  void* mine = nullptr;
  int peer = -1;
  gpu::MemHandle theirs;
  bool* freed = nullptr;
  ~Probe() override {
    if (!svc) return;
    try {
      svc->release_peer_memory(peer, theirs);
      svc->backend().free(mine);
      *freed = true;
    } catch (...) {
      *freed = false;
    }
  }
};

}  // namespace

TEST(MpUpperTeardown, UpperStateFreesItsMemoryAtClose) {
  const std::string uid = pltest::unique_test_id("upper");
  std::string fails = run_ranks(2, [&](int rank) {
    Options o;
    o.timeout = milliseconds(10000);
    o.host_fd = false;  // named segments: the check below looks for the freed segment's file
    bool freed = false;
    std::string my_segment;
    {
      Communicator comm(uid, rank, 2, kHostDevice, o);
      detail::CommServices& svc = detail::services(comm);
      void* mine = svc.backend().alloc(4096);
      size_t off = 0;
      gpu::MemHandle h = svc.export_memory(mine, 4096, &off);
      my_segment = reinterpret_cast<const char*>(h.data);
      std::vector<gpu::MemHandle> all(2);
      svc.allgather(&h, sizeof h, all.data());
      const int peer = 1 - rank;
      void* mapped = svc.open_peer_memory(peer, all[peer]);
      MP_CHECK(mapped != nullptr);
      auto probe = std::make_shared<Probe>();  // (no temporary Probe: its destructor frees)
      probe->svc = &svc;
      probe->mine = mine;
      probe->peer = peer;
      probe->theirs = all[peer];
      probe->freed = &freed;
      MP_CHECK(&svc.get_or_create<Probe>([&] { return probe; }) == probe.get());
      MP_CHECK(svc.find<Probe>() == probe);
      MP_CHECK(&svc.get_or_create<Probe>([] { return std::make_shared<Probe>(); }) == probe.get());  // made once
      probe.reset();  // the communicator owns it now
      // Real upper layers too: their teardown takes the same path.
      float x[4] = {1, 2, 3, 4};
      allreduce(comm, x, x, 4, DataType::F32, ReduceOp::Sum);
      MP_CHECK(x[3] == 8.0f);
      comm.barrier();
      comm.close();
      MP_CHECK_MSG(freed, "the upper state's destructor could not free its memory at close()");
      // Freed by the upper layer itself: the segment is gone now, not only with the transport.
      MP_CHECK_MSG(!common::Segment::open(my_segment).valid(), my_segment << " still exists after close");
      // After close the teardown path is closed again: a late call is refused.
      MP_CHECK_THROWS(svc.backend(), InvalidArgument, "closed");
    }
  });
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}
