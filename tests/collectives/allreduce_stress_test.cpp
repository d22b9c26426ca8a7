// Allreduce protocol stress and failure handling on the host backend, plus the pure helpers
// (names, parsing, half conversions, work split).
#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "allreduce_harness.h"
#include "collectives/layout.h"
#include "peerlink/peerlink.h"
#include "support/mp.h"

namespace {

using namespace pltest;
using namespace pltest::coll;
using peerlink::AllreduceAlgo;
using peerlink::Communicator;
using peerlink::Options;

// 10,000 back-to-back calls with data that changes every call and sizes that cross the one-shot /
// two-shot boundary, every result verified: a flag or slot race shows up as a wrong sum.
TEST(AllreduceHost, TenThousandBackToBack) {
  const int world = 4;
  std::string uid = unique_test_id("ar-10k");
  std::string fail = run_ranks(world, [&](int rank) {
    setenv("PEERLINK_ALLREDUCE_SCRATCH_BYTES", "4096", 1);  // also many multi-step calls
    Options o = Options::from_env();
    o.allreduce_algo = peerlink::AllreduceAlgo::Auto;
    Communicator comm(uid, rank, world, peerlink::kHostDevice, o);
    const size_t sizes[] = {1, 3, 17, 250, 1500, 20000};  // i32: 4 B .. 80 KB (> 64 KB: two-shot)
    std::vector<int32_t> buf(20000);
    for (int it = 0; it < 10000; ++it) {
      size_t n = sizes[it % 6];
      for (size_t i = 0; i < n; ++i) buf[i] = int32_t((it * 31 + rank * 7 + int(i)) % 1000 + 1);
      peerlink::allreduce(comm, buf.data(), buf.data(), n, DataType::I32, ReduceOp::Sum);
      for (size_t i = 0; i < n; ++i) {
        int32_t want = 0;
        for (int r = 0; r < world; ++r) want += int32_t((it * 31 + r * 7 + int(i)) % 1000 + 1);
        MP_CHECK_MSG(buf[i] == want, "call " << it << " count " << n << " element " << i << ": " << buf[i]
                                             << " != " << want);
      }
    }
  }, std::chrono::milliseconds(120000));
  EXPECT_EQ(fail, "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

TEST(AllreduceHost, InvalidArguments) {
  std::string uid = unique_test_id("ar-inval");
  std::string fail = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, peerlink::kHostDevice);
    std::vector<float> a(64, 1.0f);
    MP_CHECK_THROWS(peerlink::allreduce(comm, nullptr, a.data(), 4, DataType::F32, ReduceOp::Sum),
                    peerlink::InvalidArgument, "null buffer");
    MP_CHECK_THROWS(peerlink::allreduce(comm, a.data(), a.data() + 1, 8, DataType::F32, ReduceOp::Sum),
                    peerlink::InvalidArgument, "overlap");
    MP_CHECK_THROWS(peerlink::allreduce(comm, a.data(), a.data(), 4, static_cast<DataType>(42), ReduceOp::Sum),
                    peerlink::InvalidArgument, "42");
    MP_CHECK_THROWS(peerlink::allreduce(comm, a.data(), a.data(), 4, DataType::F32, static_cast<ReduceOp>(9)),
                    peerlink::InvalidArgument, "9");
    // Nothing above reached the protocol: a real call still works and agrees.
    peerlink::allreduce(comm, a.data(), a.data(), 64, DataType::F32, ReduceOp::Sum);
    for (float v : a) MP_CHECK(v == 2.0f);
    peerlink::allreduce(comm, a.data(), a.data(), 0, DataType::F32, ReduceOp::Sum);  // no-op
  });
  EXPECT_EQ(fail, "");
}

TEST(AllreduceHost, BadAlgoOptionIsInvalidArgument) {
  std::string uid = unique_test_id("ar-badalgo");
  std::string fail = run_ranks(1, [&](int rank) {
    // A name that is no algorithm fails when the Options are read, naming the variable and the text.
    setenv("PEERLINK_ALLREDUCE_ALGO", "fastest", 1);
    MP_CHECK_THROWS(Options::from_env(), peerlink::InvalidArgument, "PEERLINK_ALLREDUCE_ALGO='fastest'");
    unsetenv("PEERLINK_ALLREDUCE_ALGO");
    // A value from code that is no algorithm: Options::validate() rejects it when the communicator
    // is created (before any rendezvous), not at the first allreduce.
    Options o;
    o.allreduce_algo = static_cast<peerlink::AllreduceAlgo>(42);
    MP_CHECK_THROWS(Communicator(uid, rank, 1, peerlink::kHostDevice, o), peerlink::InvalidArgument,
                    "allreduce_algo 42");
  });
  EXPECT_EQ(fail, "");
}

TEST(AllreduceHost, SingleRankIsCopy) {
  std::string uid = unique_test_id("ar-single");
  std::string fail = run_ranks(1, [&](int rank) {
    Communicator comm(uid, rank, 1, peerlink::kHostDevice);
    std::vector<double> in(1001), out(1001);
    for (size_t i = 0; i < in.size(); ++i) in[i] = 0.5 + double(i);
    peerlink::allreduce(comm, in.data(), out.data(), in.size(), DataType::F64, ReduceOp::Prod);
    MP_CHECK(in == out);
  });
  EXPECT_EQ(fail, "");
}

// A peer that died is reported as PeerLostError (bounded), and the communicator stays failed.
TEST(AllreduceHost, PeerDeathIsPeerLost) {
  std::string uid = unique_test_id("ar-dead");
  std::string fail = run_ranks(3, [&](int rank) {
    Options o = Options::from_env();
    o.timeout = std::chrono::milliseconds(10000);
    Communicator comm(uid, rank, 3, peerlink::kHostDevice, o);
    std::vector<float> a(1000, 1.0f);
    peerlink::allreduce(comm, a.data(), a.data(), a.size(), DataType::F32, ReduceOp::Sum);
    if (rank == 2) _exit(0);  // dies without closing
    auto t0 = std::chrono::steady_clock::now();
    MP_CHECK_THROWS(peerlink::allreduce(comm, a.data(), a.data(), a.size(), DataType::F32, ReduceOp::Sum),
                    peerlink::PeerLostError);
    MP_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(5000));
    MP_CHECK_THROWS(peerlink::allreduce(comm, a.data(), a.data(), a.size(), DataType::F32, ReduceOp::Sum),
                    peerlink::PeerLostError);
  });
  EXPECT_EQ(fail, "");
  // The dead rank's own allocations (scratch segments) cannot be unlinked by it; remove them as a
  // cleanup tool would, then nothing of this job may remain.
  peerlink::common::remove_stale_segments(peerlink::common::shm_prefix_for(uid));
  EXPECT_TRUE(leftover_segments(uid).empty());
}

// A live peer that does not join is a TimeoutError after Options::timeout, not a hang.
TEST(AllreduceHost, AbsentPeerIsTimeout) {
  std::string uid = unique_test_id("ar-absent");
  std::string fail = run_ranks(2, [&](int rank) {
    Options o = Options::from_env();
    o.timeout = std::chrono::milliseconds(300);
    Communicator comm(uid, rank, 2, peerlink::kHostDevice, o);
    std::vector<int64_t> a(100, 5);
    peerlink::allreduce(comm, a.data(), a.data(), a.size(), DataType::I64, ReduceOp::Sum);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return;
    }
    MP_CHECK_THROWS(peerlink::allreduce(comm, a.data(), a.data(), a.size(), DataType::I64, ReduceOp::Sum),
                    peerlink::TimeoutError, "rank 1");
  });
  EXPECT_EQ(fail, "");
}

TEST(AllreduceTypes, NamesAndParsing) {
  EXPECT_EQ(peerlink::dtype_size(DataType::BF16), 2u);
  EXPECT_EQ(peerlink::dtype_size(DataType::I64), 8u);
  EXPECT_EQ(peerlink::parse_dtype("BF16"), DataType::BF16);
  EXPECT_EQ(peerlink::parse_dtype("float32"), DataType::F32);
  EXPECT_EQ(peerlink::parse_dtype("half"), DataType::F16);
  EXPECT_EQ(peerlink::parse_reduce_op("Sum"), ReduceOp::Sum);
  EXPECT_EQ(peerlink::parse_reduce_op("product"), ReduceOp::Prod);
  EXPECT_EQ(peerlink::parse_allreduce_algo(""), AllreduceAlgo::Auto);
  EXPECT_EQ(peerlink::parse_allreduce_algo("TwoShot"), AllreduceAlgo::TwoShot);
  EXPECT_STREQ(peerlink::to_string(DataType::F64), "f64");
  EXPECT_STREQ(peerlink::to_string(ReduceOp::Min), "min");
  EXPECT_THROW(peerlink::parse_dtype("f8"), peerlink::InvalidArgument);
  EXPECT_EQ(peerlink::parse_reduce_op("AVG"), ReduceOp::Avg);
  EXPECT_EQ(peerlink::parse_reduce_op("mean"), ReduceOp::Avg);
  EXPECT_STREQ(peerlink::to_string(ReduceOp::Avg), "avg");
  EXPECT_THROW(peerlink::parse_reduce_op("xor"), peerlink::InvalidArgument);
  EXPECT_THROW(peerlink::parse_allreduce_algo("ring"), peerlink::InvalidArgument);
}

TEST(AllreduceTypes, HalfConversions) {
  namespace pc = peerlink::coll;
  EXPECT_EQ(pc::f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(pc::f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(pc::f32_to_f16(65520.0f), 0x7c00);                 // rounds to inf
  EXPECT_EQ(pc::f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);    // smallest subnormal
  EXPECT_EQ(pc::f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);    // tie to even -> 0
  EXPECT_EQ(pc::f32_to_f16(-2.5f), 0xc100);
  EXPECT_EQ(pc::f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(pc::f32_to_bf16(1.00390625f), 0x3f80);  // tie -> even
  EXPECT_EQ(pc::f32_to_bf16(1.01171875f), 0x3f82);  // tie -> even (up)
  for (uint32_t h = 0; h < 65536; ++h) {  // every finite half survives f16 -> f32 -> f16
    if ((h & 0x7c00) == 0x7c00) continue;
    ASSERT_EQ(pc::f32_to_f16(pc::f16_to_f32(uint16_t(h))), h) << std::hex << h;
    ASSERT_EQ(pc::f32_to_bf16(pc::bf16_to_f32(uint16_t(h))), h) << std::hex << h;
  }
  EXPECT_FLOAT_EQ(pc::f16_to_f32(0x3555), 0.333251953125f);
}

TEST(AllreduceTypes, SplitCoversEveryElementOnce) {
  namespace pc = peerlink::coll;
  for (size_t count : {1, 7, 8, 9, 1000, 4097, 100003})
    for (int world : {1, 2, 3, 4, 8})
      for (bool one : {true, false})
        for (int blocks : {1, 3, 16}) {
          pc::Split s = pc::make_split(count, 2, world, 256, one, blocks);
          std::vector<int> seen(count, 0);
          for (size_t st = 0; st < s.steps; ++st) {
            size_t e0 = st * s.step_elems, len = std::min(s.step_elems, count - e0);
            ASSERT_LE(s.shard * 2, 256u);
            for (int q = 0; q < (one ? 1 : world); ++q)
              for (int b = 0; b < blocks; ++b)
                for (size_t k = b * s.per_block; k < (b + 1) * s.per_block && k < s.shard; ++k) {
                  size_t e = q * s.shard + k;
                  if (e < len) seen[e0 + e]++;
                }
          }
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(seen[i], 1) << "count " << count << " world " << world << " one " << one << " blocks " << blocks;
        }
}

}  // namespace
