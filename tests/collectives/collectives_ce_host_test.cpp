// The copy-engine algorithm and the selection knobs of the moving collectives (Options "ce",
// coll_ll_max, coll_ce_min, coll_ce_chunk_bytes, coll_ce_lanes): parsing and validation, and on
// the host backend (which has no copy-engine path and runs the push plan for "ce") the same
// payload checks as collectives_host_test.cpp. The GPU path is covered by coll_ce_gpu_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "coll_harness.h"
#include "peerlink/errors.h"
#include "support/mp.h"

namespace {

using namespace pltest;
using namespace pltest::coll;
using peerlink::CollAlgo;
using peerlink::Communicator;
using peerlink::InvalidArgument;
using peerlink::Options;

TEST(CollCeOptions, ParseAndValidate) {
  EXPECT_EQ(peerlink::parse_coll_algo("CE"), CollAlgo::CopyEngine);
  EXPECT_EQ(peerlink::parse_coll_algo("copy_engine"), CollAlgo::CopyEngine);
  EXPECT_STREQ(peerlink::to_string(CollAlgo::CopyEngine), "ce");
  EXPECT_THROW(peerlink::parse_coll_algo("cee"), InvalidArgument);
  Options o;
  o.all_gather_algo = o.broadcast_algo = o.all_to_all_algo = CollAlgo::CopyEngine;
  EXPECT_NO_THROW(o.validate());
  o.reduce_algo = o.reduce_scatter_algo = CollAlgo::CopyEngine;  // copy in, reduction kernel per step
  EXPECT_NO_THROW(o.validate());
  Options l;
  l.coll_ce_lanes = 0;
  EXPECT_THROW(l.validate(), InvalidArgument);
  l.coll_ce_lanes = 5;
  EXPECT_THROW(l.validate(), InvalidArgument);
  l.coll_ce_lanes = 4;
  l.coll_ce_chunk_bytes = 32;  // below one 64-byte scratch unit
  EXPECT_THROW(l.validate(), InvalidArgument);
  l.coll_ce_chunk_bytes = 64;
  l.coll_ll_max = (size_t(1) << 28) + 1;
  EXPECT_THROW(l.validate(), InvalidArgument);
  l.coll_ll_max = 0;
  EXPECT_NO_THROW(l.validate());
}

TEST(CollCeOptions, FromEnv) {
  struct Var {
    const char* name;
    const char* value;
  };
  const Var good[] = {{"PEERLINK_COLL_LL_MAX", "262144"}, {"PEERLINK_COLL_CE_MIN", "1048576"},
                      {"PEERLINK_COLL_CE_CHUNK_BYTES", "4194304"}, {"PEERLINK_COLL_CE_LANES", "2"},
                      {"PEERLINK_BROADCAST_ALGO", "CE"}};
  for (const Var& v : good) setenv(v.name, v.value, 1);
  Options o = Options::from_env();
  EXPECT_EQ(o.coll_ll_max, size_t(262144));
  EXPECT_EQ(o.coll_ce_min, size_t(1048576));
  EXPECT_EQ(o.coll_ce_chunk_bytes, size_t(4194304));
  EXPECT_EQ(o.coll_ce_lanes, 2);
  EXPECT_EQ(o.broadcast_algo, CollAlgo::CopyEngine);
  for (const Var& v : good) unsetenv(v.name);
  const Var bad[] = {{"PEERLINK_COLL_CE_LANES", "9"}, {"PEERLINK_COLL_LL_MAX", "-1"}, {"PEERLINK_REDUCE_ALGO", "c"},
                     {"PEERLINK_COLL_CE_CHUNK_BYTES", "8"}};
  for (const Var& v : bad) {
    setenv(v.name, v.value, 1);
    EXPECT_THROW(Options::from_env(), InvalidArgument) << v.name << "=" << v.value;
    unsetenv(v.name);
  }
}

// Every kind with the given Options ("ce": push plan on the host), all_to_all_v always pushing.
void sweep(int world, Options o, const std::vector<size_t>& sizes, const char* tag) {
  const DataType types[] = {DataType::BF16, DataType::I32, DataType::F64};
  const std::vector<Kind> kinds = {Kind::AllGather, Kind::ReduceScatter, Kind::Broadcast,
                                   Kind::Reduce,    Kind::AllToAll,      Kind::AllToAllV};
  const int cases = int(kinds.size() * std::size(types) * sizes.size());
  HashTable hashes(world, cases);
  std::string uid = unique_test_id(std::string("coce-") + tag);
  std::string fail = run_ranks(world, [&](int rank) {
    Communicator comm(uid, rank, world, peerlink::kHostDevice, o);
    Mem mem;
    int c = 0;
    for (Kind k : kinds)
      for (DataType t : types)
        for (size_t n : sizes) {
          int root = c % world;
          bool in_place = c % 3 == 1 && k != Kind::AllToAllV;
          std::string what = std::string(kind_name(k)) + " " + tag + " " + peerlink::to_string(t) + " count " +
                             std::to_string(n) + " world " + std::to_string(world) + (in_place ? " in place" : "");
          hashes.put(rank, c, run_case(comm, mem, k, t, ReduceOp::Sum, n, root, in_place, 5100 + c, what));
          ++c;
        }
  });
  EXPECT_EQ(fail, "");
  EXPECT_EQ(hashes.mismatch(cases), "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

Options ce_opts() {
  Options o = Options::from_env();
  o.all_gather_algo = o.broadcast_algo = o.all_to_all_algo = o.reduce_algo = o.reduce_scatter_algo = CollAlgo::CopyEngine;
  o.allreduce_scratch_bytes = 1024;  // many steps per call
  o.coll_ce_chunk_bytes = 256;
  o.coll_ce_lanes = 3;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

TEST(CollCeHost, ForcedCeRunsPush2Ranks) { sweep(2, ce_opts(), {1, 3, 255, 1001}, "ce"); }
TEST(CollCeHost, ForcedCeRunsPush3Ranks) { sweep(3, ce_opts(), {1, 65, 1001}, "ce"); }

// The auto thresholds as knobs: LL for no piece (coll_ll_max 0), then LL for every piece here, and a
// copy-engine minimum that the host ignores.
TEST(CollCeHost, AutoKnobs2Ranks) {
  Options o = Options::from_env();
  o.timeout = std::chrono::milliseconds(20000);
  o.coll_ll_max = 0;
  o.coll_ce_min = 64;
  sweep(2, o, {1, 1001, 4099}, "ll0");
  o.coll_ll_max = size_t(1) << 20;
  sweep(2, o, {1, 1001}, "llbig");
}

}  // namespace
