// The non-allreduce collectives under stress and misuse (host backend, processes): 10,000
// back-to-back calls rotating through every kind with data that changes every call, 64 MB calls,
// bad arguments (InvalidArgument naming the values, nothing written, the protocol still in step),
// bad algorithm options, and a peer that dies (PeerLostError, bounded).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "coll_harness.h"
#include "common/shm_segment.h"
#include "support/mp.h"

namespace {

using namespace pltest;
using namespace pltest::coll;
using peerlink::Communicator;
using peerlink::Options;

// 10,000 calls: kinds rotate, sizes cross the LL/push boundary (host LL up to 16 KB), 4 KB scratch
// positions make many calls multi-step. A slot or flag race shows up as a wrong value.
TEST(CollectivesHost, TenThousandBackToBack) {
  const int world = 3;
  std::string uid = unique_test_id("co-10k");
  std::string fail = run_ranks(world, [&](int rank) {
    Options o = Options::from_env();
    o.allreduce_scratch_bytes = 4096;
    Communicator comm(uid, rank, world, peerlink::kHostDevice, o);
    const size_t sizes[] = {1, 3, 17, 250, 1500, 5000};  // i32 per piece: 4 B .. 20 KB
    std::vector<int32_t> send(world * 5000), recv(world * 5000);
    std::vector<size_t> cnt(world), dsp(world);
    auto val = [](int it, int from, int to, size_t i) { return int32_t((it * 31 + from * 7 + to * 3 + int(i)) % 1000 + 1); };
    for (int it = 0; it < 10000; ++it) {
      const size_t n = sizes[(it / 6) % 6];
      const int kind = it % 6, root = it % world;
      switch (kind) {
        case 0:  // all_gather
          for (size_t i = 0; i < n; ++i) send[i] = val(it, rank, 0, i);
          peerlink::all_gather(comm, send.data(), recv.data(), n, DataType::I32);
          for (int r = 0; r < world; ++r)
            for (size_t i = 0; i < n; ++i) MP_CHECK_MSG(recv[r * n + i] == val(it, r, 0, i), "call " << it << " all_gather");
          break;
        case 1:  // reduce_scatter (sum)
          for (int q = 0; q < world; ++q)
            for (size_t i = 0; i < n; ++i) send[q * n + i] = val(it, rank, q, i);
          peerlink::reduce_scatter(comm, send.data(), recv.data(), n, DataType::I32, ReduceOp::Sum);
          for (size_t i = 0; i < n; ++i) {
            int32_t want = 0;
            for (int r = 0; r < world; ++r) want += val(it, r, rank, i);
            MP_CHECK_MSG(recv[i] == want, "call " << it << " reduce_scatter element " << i);
          }
          break;
        case 2:  // broadcast, in place
          for (size_t i = 0; i < n; ++i) recv[i] = rank == root ? val(it, root, 0, i) : -1;
          peerlink::broadcast(comm, recv.data(), recv.data(), n, DataType::I32, root);
          for (size_t i = 0; i < n; ++i) MP_CHECK_MSG(recv[i] == val(it, root, 0, i), "call " << it << " broadcast");
          break;
        case 3:  // reduce (max) to root
          for (size_t i = 0; i < n; ++i) send[i] = val(it, rank, 0, i);
          peerlink::reduce(comm, send.data(), recv.data(), n, DataType::I32, ReduceOp::Max, root);
          if (rank == root)
            for (size_t i = 0; i < n; ++i) {
              int32_t want = val(it, 0, 0, i);
              for (int r = 1; r < world; ++r) want = std::max(want, val(it, r, 0, i));
              MP_CHECK_MSG(recv[i] == want, "call " << it << " reduce element " << i);
            }
          break;
        case 4:  // all_to_all
          for (int q = 0; q < world; ++q)
            for (size_t i = 0; i < n; ++i) send[q * n + i] = val(it, rank, q, i);
          peerlink::all_to_all(comm, send.data(), recv.data(), n, DataType::I32);
          for (int r = 0; r < world; ++r)
            for (size_t i = 0; i < n; ++i) MP_CHECK_MSG(recv[r * n + i] == val(it, r, rank, i), "call " << it << " all_to_all");
          break;
        case 5: {  // all_to_all_v: piece (from, to) has (n + from + 2*to) % (n+1) elements
          auto c = [&](int from, int to) { return (n + from + 2 * to) % (n + 1); };
          std::vector<size_t> sc(world), sd(world), rc(world), rd(world);
          size_t so = 0, ro = 0;
          for (int q = 0; q < world; ++q) {
            sc[q] = c(rank, q), sd[q] = so, so += sc[q];
            rc[q] = c(q, rank), rd[q] = ro, ro += rc[q];
            for (size_t i = 0; i < sc[q]; ++i) send[sd[q] + i] = val(it, rank, q, i);
          }
          peerlink::all_to_all_v(comm, send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(), DataType::I32);
          for (int q = 0; q < world; ++q)
            for (size_t i = 0; i < rc[q]; ++i) MP_CHECK_MSG(recv[rd[q] + i] == val(it, q, rank, i), "call " << it << " all_to_all_v");
          break;
        }
      }
    }
  }, std::chrono::milliseconds(180000));
  EXPECT_EQ(fail, "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

// 64 MB: all_gather into 64 MB, reduce_scatter of 64 MB (bf16: accumulation in f32), broadcast of
// 64 MB; 1 MB scratch positions, so many steps per call.
TEST(CollectivesHost, Large64MB) {
  const int world = 2;
  std::string uid = unique_test_id("co-64m");
  std::string fail = run_ranks(world, [&](int rank) {
    Communicator comm(uid, rank, world, peerlink::kHostDevice);
    Mem mem;
    const size_t mb = size_t(64) << 20;
    run_case(comm, mem, Kind::AllGather, DataType::F32, ReduceOp::Sum, mb / 4 / world, 0, false, 11, "all_gather 64 MB");
    run_case(comm, mem, Kind::ReduceScatter, DataType::BF16, ReduceOp::Sum, mb / 2 / world, 0, true, 12,
             "reduce_scatter 64 MB");
    run_case(comm, mem, Kind::Broadcast, DataType::I64, ReduceOp::Sum, mb / 8 + 1, 1, false, 13, "broadcast 64 MB");
  }, std::chrono::milliseconds(180000));
  EXPECT_EQ(fail, "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

TEST(CollectivesHost, InvalidArgumentsWriteNothing) {
  std::string uid = unique_test_id("co-inval");
  std::string fail = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, peerlink::kHostDevice);
    std::vector<float> a(64, 1.0f + rank), b(64, -7.0f);
    using peerlink::InvalidArgument;
    MP_CHECK_THROWS(peerlink::all_gather(comm, nullptr, b.data(), 4, DataType::F32), InvalidArgument, "sendbuf");
    MP_CHECK_THROWS(peerlink::all_gather(comm, b.data() + 1, b.data(), 4, DataType::F32), InvalidArgument, "overlap");
    MP_CHECK_THROWS(peerlink::reduce_scatter(comm, b.data() + 3, b.data(), 4, DataType::F32, ReduceOp::Sum),
                    InvalidArgument, "overlap");
    MP_CHECK_THROWS(peerlink::reduce_scatter(comm, a.data(), b.data(), 4, DataType::F32, static_cast<ReduceOp>(9)),
                    InvalidArgument, "9");
    MP_CHECK_THROWS(peerlink::broadcast(comm, a.data(), b.data(), 4, DataType::F32, 2), InvalidArgument, "root 2");
    MP_CHECK_THROWS(peerlink::reduce(comm, a.data(), b.data(), 4, DataType::F32, ReduceOp::Sum, -1), InvalidArgument,
                    "root -1");
    MP_CHECK_THROWS(peerlink::reduce(comm, a.data(), b.data(), 4, static_cast<DataType>(42), ReduceOp::Sum, 0),
                    InvalidArgument, "42");
    MP_CHECK_THROWS(peerlink::all_to_all(comm, a.data() + 1, a.data(), 4, DataType::F32), InvalidArgument, "overlap");
    size_t c[2] = {2, 2}, d[2] = {0, 2}, c2[2] = {3, 3};
    MP_CHECK_THROWS(peerlink::all_to_all_v(comm, a.data(), c, d, b.data(), nullptr, d, DataType::F32), InvalidArgument,
                    "null");
    MP_CHECK_THROWS(peerlink::all_to_all_v(comm, a.data(), c, d, b.data(), c2, d, DataType::F32), InvalidArgument,
                    "itself");
    size_t huge[2] = {SIZE_MAX / 2, 1};
    MP_CHECK_THROWS(peerlink::all_to_all_v(comm, a.data(), c, huge, b.data(), c, d, DataType::F32), InvalidArgument,
                    "overflows");
    for (float v : b) MP_CHECK_MSG(v == -7.0f, "a rejected call wrote its output");
    // Nothing above reached the protocol: real calls still agree.
    peerlink::all_gather(comm, a.data(), b.data(), 32, DataType::F32);
    for (int i = 0; i < 64; ++i) MP_CHECK(b[i] == (i < 32 ? 1.0f : 2.0f));
    peerlink::all_gather(comm, a.data(), b.data(), 0, DataType::F32);  // no-op
    peerlink::broadcast(comm, nullptr, nullptr, 0, DataType::F32, 1);  // no-op
  });
  EXPECT_EQ(fail, "");
}

TEST(CollectivesHost, BadAlgoOptionIsInvalidArgument) {
  Options o;
  o.all_to_all_algo = static_cast<peerlink::CollAlgo>(42);
  try {
    o.validate();
    FAIL() << "validate() accepted all_to_all_algo 42";
  } catch (const peerlink::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("all_to_all_algo 42"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("PEERLINK_ALL_TO_ALL_ALGO"), std::string::npos) << e.what();
  }
  setenv("PEERLINK_ALL_TO_ALL_ALGO", "fastest", 1);
  try {
    Options::from_env();
    ADD_FAILURE() << "from_env() accepted PEERLINK_ALL_TO_ALL_ALGO=fastest";
  } catch (const peerlink::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("PEERLINK_ALL_TO_ALL_ALGO='fastest'"), std::string::npos) << e.what();
  }
  unsetenv("PEERLINK_ALL_TO_ALL_ALGO");
  EXPECT_EQ(peerlink::parse_coll_algo("LL"), peerlink::CollAlgo::LL);
  EXPECT_EQ(peerlink::parse_coll_algo(""), peerlink::CollAlgo::Auto);
  EXPECT_STREQ(peerlink::to_string(peerlink::CollAlgo::Push), "push");
}

// Without an LL area (allreduce_ll_max 0) a forced LL is refused on every rank before anything
// moves, and the automatic choice pushes instead.
TEST(CollectivesHost, NoLLAreaFallsBackToPush) {
  std::string uid = unique_test_id("co-noll");
  std::string fail = run_ranks(2, [&](int rank) {
    Options o = Options::from_env();
    o.allreduce_ll_max = 0;
    o.broadcast_algo = peerlink::CollAlgo::LL;
    Communicator comm(uid, rank, 2, peerlink::kHostDevice, o);
    std::vector<int64_t> a(10, rank + 1), b(20, 0);
    MP_CHECK_THROWS(peerlink::broadcast(comm, a.data(), a.data(), a.size(), DataType::I64, 0),
                    peerlink::InvalidArgument, "LL");
    peerlink::all_gather(comm, a.data(), b.data(), a.size(), DataType::I64);
    for (int i = 0; i < 20; ++i) MP_CHECK(b[i] == (i < 10 ? 1 : 2));
  });
  EXPECT_EQ(fail, "");
}

// A peer that died is PeerLostError within about a second on both paths, and stays so.
TEST(CollectivesHost, PeerDeathIsPeerLost) {
  for (const char* algo : {"ll", "push"}) {
    std::string uid = unique_test_id(std::string("co-dead-") + algo);
    std::string fail = run_ranks(3, [&](int rank) {
      Options o = Options::from_env();
      o.timeout = std::chrono::milliseconds(10000);
      o.all_gather_algo = o.broadcast_algo = peerlink::parse_coll_algo(algo);
      Communicator comm(uid, rank, 3, peerlink::kHostDevice, o);
      std::vector<float> a(100, 1.0f), b(300);
      peerlink::all_gather(comm, a.data(), b.data(), a.size(), DataType::F32);
      if (rank == 2) _exit(0);  // dies without closing
      auto t0 = std::chrono::steady_clock::now();
      MP_CHECK_THROWS(peerlink::all_gather(comm, a.data(), b.data(), a.size(), DataType::F32), peerlink::PeerLostError);
      MP_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(5000));
      MP_CHECK_THROWS(peerlink::broadcast(comm, a.data(), a.data(), a.size(), DataType::F32, 0), peerlink::PeerLostError);
    });
    EXPECT_EQ(fail, "") << algo;
    peerlink::common::remove_stale_segments(peerlink::common::shm_prefix_for(uid));
    EXPECT_TRUE(leftover_segments(uid).empty());
  }
}

}  // namespace
