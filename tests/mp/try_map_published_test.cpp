// CommServices::try_map_published, which the stream engine's zero-copy sender polls with
// (src/stream/stream_zc.h): nothing before the peer publishes, the whole publication after,
// typed errors for another version, a freed buffer and a bad peer. Fork-based, host backend.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "peerlink/peerlink.h"
#include "support/mp.h"
#include "transport/services.h"

using namespace peerlink;
using namespace std::chrono;
using pltest::run_ranks;

TEST(MpTryMapPublished, NothingBeforeThenWholePublicationThenTypedErrors) {
  const std::string uid = pltest::unique_test_id("trymap");
  std::string fails = run_ranks(2, [&](int rank) {
    Options o;
    o.timeout = milliseconds(10000);
    Communicator comm(uid, rank, 2, kHostDevice, o);
    detail::CommServices& svc = detail::services(comm);
    const uint32_t id = 0xFFFFFF45u;  // a zero-copy slot id (reserved ids go through this path)
    const size_t n = 8192;
    size_t len = 0;
    std::shared_ptr<void> hold;
    if (rank == 1) MP_CHECK(svc.try_map_published(0, id, 1, &len, &hold) == nullptr);
    comm.barrier();
    char* p = nullptr;
    if (rank == 0) {
      p = static_cast<char*>(comm.alloc(n));
      std::vector<char> h(n);
      pltest::fill_pattern(h.data(), n, 77);
      std::memcpy(p, h.data(), n);
      svc.notify_ipc_buffer(1, id, p, n, 1);
    }
    comm.barrier();
    if (rank == 1) {
      void* base = svc.try_map_published(0, id, 1, &len, &hold);
      MP_CHECK(base != nullptr);
      MP_CHECK_MSG(len == n, "len " << len);
      MP_CHECK(pltest::check_pattern(static_cast<const char*>(base), n, 77) == SIZE_MAX);
      MP_CHECK_THROWS(svc.try_map_published(0, id, 2, &len, &hold), InvalidArgument, "version");
      MP_CHECK_THROWS(svc.try_map_published(5, id, 1, &len, &hold), InvalidArgument, "5");
    }
    comm.barrier();
    if (rank == 0) comm.free(p);  // revokes the publication
    comm.barrier();
    if (rank == 1) MP_CHECK_THROWS(svc.try_map_published(0, id, 1, &len, &hold), InvalidArgument, "freed");
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}
