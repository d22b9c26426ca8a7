// The contract of registered windows (peerlink/windows.h) on the host backend, one process per
// rank: registration (ids in step on every rank, overlap, exportability, register then free at
// once), typed errors for misuse (InvalidArgument before anything reaches the protocol), a
// contract violation (offsets or windows that differ between ranks) and a peer that dies.
// The zero-copy data path itself: collectives_window_host_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "coll_harness.h"
#include "common/shm_segment.h"
#include "config/test_hooks.h"
#include "peerlink/errors.h"
#include "support/mp.h"
#include "window_host_harness.h"

namespace {

using namespace pltest;
using namespace pltest::coll;
using peerlink::Communicator;
using peerlink::InvalidArgument;
using peerlink::Options;

TEST(CollWindowHost, RegisterIdsAndZeroCopyQuery) {
  const int world = 3;
  Shared ids(world * 8);
  std::string uid = unique_test_id("cowin-reg");
  std::string fail = run_ranks(world, [&](int rank) {
    Communicator comm(uid, rank, world, peerlink::kHostDevice, wopts("", 1));
    char* a = static_cast<char*>(comm.alloc(16384));
    MP_CHECK(!peerlink::window_zero_copy(comm, a, 16));  // nothing registered yet
    uint64_t w1 = peerlink::register_window(comm, a + 4096, 4096);
    uint64_t w2 = peerlink::register_window(comm, a, 4096);         // adjacent below
    uint64_t w3 = peerlink::register_window(comm, a + 8192, 4096);  // adjacent above
    MP_CHECK_MSG(w1 == 1 && w2 == 2 && w3 == 3, "ids " << w1 << " " << w2 << " " << w3);
    MP_CHECK(peerlink::window_zero_copy(comm, a + 4096, 4096));
    MP_CHECK(!peerlink::window_zero_copy(comm, a + 4000, 200));  // spans two windows
    MP_CHECK(!peerlink::window_zero_copy(comm, a + 12288, 16));  // registered by no window
    peerlink::deregister_window(comm, w1);
    MP_CHECK(!peerlink::window_zero_copy(comm, a + 4096, 16));
    MP_CHECK(peerlink::window_zero_copy(comm, a + 8192, 16));
    MP_CHECK_THROWS(peerlink::deregister_window(comm, w1), InvalidArgument);  // twice
    uint64_t w4 = peerlink::register_window(comm, a + 4096, 4096);  // the same range again
    MP_CHECK(w4 > w3 && peerlink::window_zero_copy(comm, a + 4096, 4096));
    // Memory the host backend cannot export (new[]) registers, without zero-copy.
    std::vector<int32_t> heap(4096, -1);
    uint64_t w5 = peerlink::register_window(comm, heap.data(), heap.size() * 4);
    MP_CHECK(!peerlink::window_zero_copy(comm, heap.data(), 16));
    // A window that one rank could not export is zero-copy on no rank.
    std::vector<char> other(4096);
    char* mixed = rank == 1 ? other.data() : a + 12288;
    uint64_t w6 = peerlink::register_window(comm, mixed, 4096);
    MP_CHECK_MSG(!peerlink::window_zero_copy(comm, mixed, 4096), "rank 1 did not export window " << w6);
    int64_t got[] = {int64_t(w1), int64_t(w2), int64_t(w3), int64_t(w4), int64_t(w5), int64_t(w6)};
    for (int i = 0; i < 6; ++i) ids.v[rank * 8 + i] = got[i];
    // Collectives on the non-exportable window take another path (auto) with the same results.
    std::vector<int32_t> mine(1000);
    for (int i = 0; i < 1000; ++i) mine[i] = rank * 100000 + i;
    peerlink::all_gather(comm, mine.data(), heap.data(), 1000, DataType::I32);
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < 1000; ++i) MP_CHECK(heap[r * 1000 + i] == r * 100000 + i);
    MP_CHECK(heap[3000] == -1);
    peerlink::broadcast(comm, mine.data(), heap.data(), 1000, DataType::I32, 2);
    for (int i = 0; i < 1000; ++i) MP_CHECK(heap[i] == 200000 + i);
    for (uint64_t w : {w2, w3, w4, w5, w6}) peerlink::deregister_window(comm, w);
    comm.free(a);
  });
  EXPECT_EQ(fail, "");
  for (int r = 1; r < world; ++r)
    for (int i = 0; i < 6; ++i) EXPECT_EQ(ids.v[r * 8 + i], ids.v[i]) << "rank " << r << " id " << i;
  EXPECT_TRUE(leftover_segments(uid).empty());
}

TEST(CollWindowHost, BadInputIsInvalidArgument) {
  std::string uid = unique_test_id("cowin-bad");
  std::string fail = run_ranks(2, [&](int rank) {
    Options o = wopts("zero_copy", 1, 5000);
    Communicator comm(uid, rank, 2, peerlink::kHostDevice, o);
    char* a = static_cast<char*>(comm.alloc(16384));
    MP_CHECK_THROWS(peerlink::register_window(comm, nullptr, 64), InvalidArgument);
    MP_CHECK_THROWS(peerlink::register_window(comm, a, 0), InvalidArgument);
    MP_CHECK_THROWS(peerlink::deregister_window(comm, 12345), InvalidArgument);
    MP_CHECK_THROWS(peerlink::deregister_window(comm, 0), InvalidArgument);
    uint64_t w = peerlink::register_window(comm, a + 4096, 4096);
    for (std::pair<size_t, size_t> r : {std::pair<size_t, size_t>{4096, 4096}, {5000, 100}, {4095, 2}, {8191, 1},
                                        {0, 16384}})
      MP_CHECK_THROWS(peerlink::register_window(comm, a + r.first, r.second), InvalidArgument, "overlap");
    // Forced zero-copy needs a recvbuf in a zero-copy window: heap, comm.alloc memory outside any
    // window, a window of non-exportable memory, a range running past the window's end.
    std::vector<int32_t> src(64, rank + 1), heap(128, -7);
    int32_t* unreg = reinterpret_cast<int32_t*>(a + 8192);
    int32_t* win = reinterpret_cast<int32_t*>(a + 4096);
    uint64_t wh = peerlink::register_window(comm, heap.data(), heap.size() * 4);
    for (int32_t* dst : {heap.data(), unreg, win + 1000}) {
      MP_CHECK_THROWS(peerlink::all_gather(comm, src.data(), dst, 64, DataType::I32), InvalidArgument, "recv");
      MP_CHECK_THROWS(peerlink::all_to_all(comm, src.data(), dst, 32, DataType::I32), InvalidArgument, "recv");
      MP_CHECK_THROWS(peerlink::broadcast(comm, src.data(), dst, 64, DataType::I32, 0), InvalidArgument, "recv");
    }
    for (int32_t v : heap) MP_CHECK_MSG(v == -7, "a rejected call wrote its output");
    // all_to_all_algo covers all_to_all_v, which has no zero-copy path.
    size_t c[2] = {2, 2}, d[2] = {0, 2};
    MP_CHECK_THROWS(peerlink::all_to_all_v(comm, src.data(), c, d, win, c, d, DataType::I32), InvalidArgument);
    // Nothing above reached the protocol: a real zero-copy call still agrees.
    peerlink::all_gather(comm, src.data(), win, 64, DataType::I32);
    for (int i = 0; i < 128; ++i) MP_CHECK(win[i] == (i < 64 ? 1 : 2));
    peerlink::deregister_window(comm, wh);
    peerlink::deregister_window(comm, w);
    comm.free(a);
  });
  EXPECT_EQ(fail, "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

// reduce and reduce_scatter pull from the peers' sendbufs: forced zero-copy with the sendbuf
// outside every window (the recvbuf in one does not count) is InvalidArgument, nothing moves.
TEST(CollWindowHost, ForcedOnReducingKindsIsInvalidArgument) {
  std::string uid = unique_test_id("cowin-red");
  std::string fail = run_ranks(2, [&](int rank) {
    Options o = wopts("", 1, 5000);
    o.reduce_algo = o.reduce_scatter_algo = peerlink::CollAlgo::ZeroCopy;
    auto comm = std::make_unique<Communicator>(uid, rank, 2, peerlink::kHostDevice, o);
    char* a = static_cast<char*>(comm->alloc(8192));
    uint64_t w = peerlink::register_window(*comm, a, 8192);
    comm->barrier();  // no peer still maps `a` when it is freed (RegisterThenFreeAtOnce covers that)
    std::vector<float> src(64, 1.0f);
    float* dst = reinterpret_cast<float*>(a);
    MP_CHECK_THROWS(peerlink::reduce(*comm, src.data(), dst, 64, DataType::F32, ReduceOp::Sum, 0), InvalidArgument);
    MP_CHECK_THROWS(peerlink::reduce_scatter(*comm, src.data(), dst, 32, DataType::F32, ReduceOp::Sum), InvalidArgument);
    peerlink::deregister_window(*comm, w);
    comm->free(a);
  });
  EXPECT_EQ(fail, "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

// register_window returns on every rank, then each deregisters and frees at once (legal: the window
// is the caller's memory again). A peer still mapping the range inside its register_window must not
// fail, and the windows stay in step.
TEST(CollWindowHost, RegisterThenFreeAtOnce) {
  std::string uid = unique_test_id("cowin-regfree");
  std::string fail = run_ranks(3, [&](int rank) {
    Communicator comm(uid, rank, 3, peerlink::kHostDevice, wopts("", 1, 5000));
    for (int it = 0; it < 40; ++it) {
      void* p = comm.alloc(4096 + 64 * it);
      uint64_t id = peerlink::register_window(comm, p, 4096 + 64 * it);
      MP_CHECK_MSG(id == uint64_t(it + 1) && peerlink::window_zero_copy(comm, p, 4096), "registration " << it);
      peerlink::deregister_window(comm, id);
      comm.free(p);
    }
  });
  EXPECT_EQ(fail, "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

// Rank 1 cannot map its peers' ranges (fault injection): register_window still returns on every
// rank, promptly, with the same id, and the window has no zero-copy path anywhere (the ranks
// agree, so collectives on it take the push path and are correct).
TEST(CollWindowHost, MappingFailureOnOneRankMeansNoZeroCopyAnywhere) {
  std::string uid = unique_test_id("cowin-mapfail");
  std::string fail = run_ranks(3, [&](int rank) {
    peerlink::Options o = wopts("", 1, 5000);
    peerlink::detail::set_test_hook(o, &peerlink::detail::TestHooks::window_map_fail, rank == 1);
    Communicator comm(uid, rank, 3, peerlink::kHostDevice, o);
    const size_t n = 1000;
    auto* dst = static_cast<int32_t*>(comm.alloc(n * 3 * sizeof(int32_t)));
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t id = peerlink::register_window(comm, dst, n * 3 * sizeof(int32_t));
    MP_CHECK_MSG(std::chrono::steady_clock::now() - t0 < ms(3000), "register_window waited for a timeout");
    MP_CHECK(id == 1);
    MP_CHECK_MSG(!peerlink::window_zero_copy(comm, dst, 16), "rank " << rank << " kept a zero-copy window");
    std::vector<int32_t> src(n);
    for (size_t i = 0; i < n; ++i) src[i] = rank * 100000 + int32_t(i);
    peerlink::all_gather(comm, src.data(), dst, n, DataType::I32);  // auto: the push path
    for (int q = 0; q < 3; ++q)
      for (size_t i = 0; i < n; i += 97) MP_CHECK(dst[q * n + i] == q * 100000 + int32_t(i));
    peerlink::deregister_window(comm, id);
    comm.free(dst);
    comm.barrier();
  });
  EXPECT_EQ(fail, "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

// Contract violation, detected in the same call. Variant 0: rank 1's recvbuf at another offset,
// in bounds everywhere; 1: in another window at the same offset; 2: at another offset such that
// rank 1's pieces would run past rank 0's (4 KB smaller) window. First error InvalidArgument on at
// least one rank and nothing else on any rank (a live peer is not "lost"), within the timeout,
// nothing written outside the windows, clean exit.
TEST(CollWindowHost, MismatchedWindowOrOffsetIsInvalidArgument) {
  for (int variant : {0, 1, 2}) {
    Shared out(4);  // [rank]: outcome, [2 + rank]: ms in the call
    std::string uid = unique_test_id("cowin-mis" + std::to_string(variant));
    std::string fail = run_ranks(2, [&](int rank) {
      Communicator comm(uid, rank, 2, peerlink::kHostDevice, wopts("zero_copy", 1, 3000));
      const size_t lead = 4096, b2 = 64 << 10, b1 = b2 + (rank == 1 ? 4096 : 0), gap = 4096;
      const size_t total = lead + b1 + gap + b2 + gap;
      char* a = static_cast<char*>(comm.alloc(total));
      std::memset(a, 0xA5, total);
      char* w1 = a + lead;
      char* w2 = w1 + b1 + gap;
      uint64_t id1 = peerlink::register_window(comm, w1, b1), id2 = peerlink::register_window(comm, w2, b2);
      std::vector<int32_t> src(8192, rank + 1);
      peerlink::all_gather(comm, src.data(), w1, 8192, DataType::I32);  // the contract kept: works
      MP_CHECK(reinterpret_cast<int32_t*>(w1)[8191] == 1 && reinterpret_cast<int32_t*>(w1)[8192] == 2);
      char* dst = rank == 0 ? w1 : variant == 1 ? w2 : w1 + 4096;
      const size_t count = variant == 2 ? 8192 : 4096;  // 64 KB out (ends at rank 1's window end) or 32 KB
      out.v[rank] = outcome_of([&] { peerlink::all_gather(comm, src.data(), dst, count, DataType::I32); },
                               &out.v[2 + rank]);
      std::this_thread::sleep_for(ms(200));  // let a late peer write, if it writes
      for (size_t i = 0; i < total; ++i)
        if (i < lead || (i >= lead + b1 && i < lead + b1 + gap) || i >= lead + b1 + gap + b2)
          MP_CHECK_MSG(static_cast<unsigned char>(a[i]) == 0xA5, "byte " << i << " outside the windows was written");
      for (uint64_t id : {id1, id2}) {
        try {
          peerlink::deregister_window(comm, id);
        } catch (const peerlink::Error&) {  // the collectives are unusable after the violation
        }
      }
      comm.free(a);
    }, ms(30000));
    EXPECT_EQ(fail, "") << "variant " << variant;
    const bool any_invalid = out.v[0] == kInvalid || out.v[1] == kInvalid;
    const bool only_ok_or_invalid = out.v[0] <= kInvalid && out.v[1] <= kInvalid && out.v[0] && out.v[1];
    EXPECT_TRUE(any_invalid && only_ok_or_invalid)
        << "variant " << variant << ": outcome of rank 0, rank 1 (1 ok, 2 InvalidArgument, 3 PeerLostError, "
        << "4 TimeoutError, 5 other): " << out.v[0] << ", " << out.v[1] << " after " << out.v[2] << ", " << out.v[3]
        << " ms";
    peerlink::common::remove_stale_segments(peerlink::common::shm_prefix_for(uid));
    EXPECT_TRUE(leftover_segments(uid).empty());
  }
}

// A peer killed mid-sequence (while the others wait in a zero-copy call): PeerLostError or
// TimeoutError on the survivors, bounded, on that call and the next; deregistering is bounded too.
TEST(CollWindowHost, KilledPeerIsPeerLostNotAHang) {
  const int world = 3;
  std::string uid = unique_test_id("cowin-kill");
  std::string fail = run_ranks(world, [&](int rank) {
    Communicator comm(uid, rank, world, peerlink::kHostDevice, wopts("zero_copy", 1, 3000));
    const size_t n = 4096;
    char* a = static_cast<char*>(comm.alloc(world * n * 4));
    uint64_t id = peerlink::register_window(comm, a, world * n * 4);
    std::vector<int32_t> src(n, rank);
    for (int it = 0; it < 5; ++it) peerlink::all_gather(comm, src.data(), a, n, DataType::I32);
    if (rank == 2) {
      std::this_thread::sleep_for(ms(50));  // the others are inside the next call by now
      _exit(0);                             // dies without closing
    }
    auto lost = [&](const char* what, const std::function<void()>& f) {
      int64_t took = 0;
      int code = outcome_of(f, &took);
      MP_CHECK_MSG(code == kPeerLost || code == kTimeout, what << " ended with " << code << ", not PeerLostError"
                                                              << " (3) or TimeoutError (4)");
      MP_CHECK_MSG(took < 6000, what << " took " << took << " ms");
    };
    lost("all_gather after the peer died", [&] { peerlink::all_gather(comm, src.data(), a, n, DataType::I32); });
    lost("the next broadcast", [&] { peerlink::broadcast(comm, a, a, n, DataType::I32, 0); });
    int64_t took = 0;
    int code = outcome_of([&] { peerlink::deregister_window(comm, id); }, &took);
    MP_CHECK_MSG(code != kOther && took < 6000, "deregister_window after the peer died: " << code << ", " << took << " ms");
    comm.free(a);
  }, ms(60000));
  EXPECT_EQ(fail, "");
  peerlink::common::remove_stale_segments(peerlink::common::shm_prefix_for(uid));
  EXPECT_TRUE(leftover_segments(uid).empty());
}

}  // namespace
