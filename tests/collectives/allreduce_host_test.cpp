// Allreduce on the host backend, one process per rank: every dtype and op, every algorithm, sizes
// from 1 element to 64 MB (odd counts, sizes that are not multiples of 16 bytes), in place and out of
// place, many-step chunking; results checked against a float64 reference and bitwise across ranks.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "allreduce_harness.h"
#include "peerlink/peerlink.h"
#include "support/mp.h"

namespace {

using namespace pltest;
using namespace pltest::coll;
using peerlink::AllreduceAlgo;
using peerlink::Communicator;
using peerlink::Options;

const DataType kTypes[] = {DataType::F32, DataType::F16, DataType::BF16, DataType::F64, DataType::I32, DataType::I64};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod, ReduceOp::Avg};

Options with_algo(const char* algo) {
  Options o = Options::from_env();
  o.allreduce_algo = peerlink::parse_allreduce_algo(algo);
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

// One allreduce of `count` elements checked against the reference; the output hash goes to the
// table. In place when `in_place`. Buffers come from malloc (any host memory is allowed).
void one_case(Communicator& comm, HashTable& hashes, int case_id, size_t count, DataType t, ReduceOp op,
              bool in_place, uint64_t seed, const std::string& what) {
  size_t es = peerlink::dtype_size(t);
  std::vector<unsigned char> in(count * es + 1), out(count * es + 1, 0xEE);
  fill_input(in.data(), count, seed, comm.rank(), t, op);
  if (in_place) {
    peerlink::allreduce(comm, in.data(), in.data(), count, t, op);
    check_result(in.data(), count, seed, comm.world_size(), t, op, what);
    hashes.put(comm.rank(), case_id, fnv1a(in.data(), count * es) | 1);
  } else {
    peerlink::allreduce(comm, in.data(), out.data(), count, t, op);
    check_result(out.data(), count, seed, comm.world_size(), t, op, what);
    MP_CHECK_MSG(out[count * es] == 0xEE, what << ": wrote past the end of recvbuf");
    hashes.put(comm.rank(), case_id, fnv1a(out.data(), count * es) | 1);
  }
}

// Every dtype x op x size for one algorithm (forced through Options::allreduce_algo).
void sweep(int world, const char* algo, const std::vector<size_t>& sizes) {
  std::string uid = unique_test_id(std::string("ar-") + algo);
  int cases = int(std::size(kTypes) * std::size(kOps) * sizes.size());
  HashTable hashes(world, cases);
  std::string fail = run_ranks(world, [&](int rank) {
    Communicator comm(uid, rank, world, peerlink::kHostDevice, with_algo(algo));
    int c = 0;
    for (DataType t : kTypes)
      for (ReduceOp op : kOps)
        for (size_t n : sizes) {
          std::string what = std::string(algo) + " " + peerlink::to_string(t) + " " + peerlink::to_string(op) +
                             " count " + std::to_string(n) + " world " + std::to_string(world);
          one_case(comm, hashes, c, n, t, op, (c % 3) == 1, 1000 + c, what);
          ++c;
        }
  });
  EXPECT_EQ(fail, "");
  EXPECT_EQ(hashes.mismatch(cases), "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

const std::vector<size_t> kSizes = {1, 2, 3, 7, 9, 33, 1001, 4099, 40000};

// One rank: the call is a copy (collectives/one_rank.h), whichever algorithm Options force.
TEST(AllreduceHost, OneRankIsACopy) {
  sweep(1, "", {1, 7, 1001, 40000});
  sweep(1, "bandwidth", {33});
}
TEST(AllreduceHost, OneShotAllTypesOps2Ranks) { sweep(2, "oneshot", kSizes); }
TEST(AllreduceHost, TwoShotAllTypesOps2Ranks) { sweep(2, "twoshot", kSizes); }
TEST(AllreduceHost, BandwidthAllTypesOps2Ranks) { sweep(2, "bandwidth", kSizes); }
TEST(AllreduceHost, AutoAllTypesOps3Ranks) { sweep(3, "", {1, 5, 17, 1001, 20001, 70001}); }
TEST(AllreduceHost, OneShotAllTypesOps3Ranks) { sweep(3, "oneshot", {3, 1001, 4099}); }
TEST(AllreduceHost, TwoShotAllTypesOps4Ranks) { sweep(4, "twoshot", {1, 3, 7, 1001, 4099}); }
TEST(AllreduceHost, OneShotAllTypesOps4Ranks) { sweep(4, "oneshot", {1, 5, 4099}); }

// A tiny scratch forces many steps per call (chunking, slot parity, shards shorter than a step).
TEST(AllreduceHost, ManyStepsSmallScratch) {
  for (int world : {2, 3, 4}) {
    std::string uid = unique_test_id("ar-steps");
    HashTable hashes(world, 64);
    std::string fail = run_ranks(world, [&](int rank) {
      setenv("PEERLINK_ALLREDUCE_SCRATCH_BYTES", "128", 1);
      int c = 0;
      for (const char* algo : {"oneshot", "twoshot"}) {
        Communicator comm(uid + algo, rank, world, peerlink::kHostDevice, with_algo(algo));
        for (size_t n : {1, 15, 16, 17, 63, 64, 65, 1000, 3333}) {
          for (DataType t : {DataType::BF16, DataType::F64}) {
            std::string what = std::string(algo) + " small scratch count " + std::to_string(n);
            one_case(comm, hashes, c, n, t, ReduceOp::Sum, c % 2 == 0, 77 + c, what);
            ++c;
          }
        }
      }
    });
    EXPECT_EQ(fail, "") << "world " << world;
    EXPECT_EQ(hashes.mismatch(36), "") << "world " << world;
  }
}

// 64 MB (f32) through the default scratch: 32+ pipelined steps; 2 and 4 ranks.
TEST(AllreduceHost, Large64MB) {
  for (int world : {2, 4}) {
    std::string uid = unique_test_id("ar-64m");
    HashTable hashes(world, 2);
    std::string fail = run_ranks(world, [&](int rank) {
      Communicator comm(uid, rank, world, peerlink::kHostDevice, with_algo(""));
      size_t n = (size_t(64) << 20) / 4;
      MP_CHECK(peerlink::allreduce_algo_for(comm, n * 4) != AllreduceAlgo::OneShot);
      one_case(comm, hashes, 0, n, DataType::F32, ReduceOp::Sum, false, 4242, "64 MB f32 sum");
      one_case(comm, hashes, 1, n / 2 + 3, DataType::BF16, ReduceOp::Max, true, 4343, "32 MB bf16 max in place");
    }, std::chrono::milliseconds(120000));
    EXPECT_EQ(fail, "") << "world " << world;
    EXPECT_EQ(hashes.mismatch(2), "") << "world " << world;
  }
}

}  // namespace
