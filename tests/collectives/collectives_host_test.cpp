// all_gather, reduce_scatter, broadcast, reduce, all_to_all(v) on the host backend, one process per
// rank: every dtype (x every op for the reducing ones), 2-8 ranks, sizes from 1 element (odd,
// not multiples of 16 bytes) to multi-step chunking, both algorithms (LL, push) and the automatic
// choice, in place and out of place, every root; checks in coll_harness.h; outputs that are the same
// everywhere are compared bitwise across ranks.
#include <gtest/gtest.h>

#include <vector>

#include "coll_harness.h"
#include "support/mp.h"

namespace {

using namespace pltest;
using namespace pltest::coll;
using peerlink::Communicator;
using peerlink::Options;

const DataType kTypes[] = {DataType::F32, DataType::F16, DataType::BF16, DataType::F64, DataType::I32, DataType::I64};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod, ReduceOp::Avg};

Options opts(const char* algo, size_t scratch = 0) {
  Options o = Options::from_env();
  o.broadcast_algo = o.reduce_algo = peerlink::parse_coll_algo(algo);
  if (std::string(algo) != "two_hop")  // a path of the rooted kinds only (Options::validate)
    o.all_gather_algo = o.reduce_scatter_algo = o.all_to_all_algo = o.broadcast_algo;
  o.allreduce_scratch_bytes = scratch;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

// Every dtype (x op) x size of `kinds` with `algo` on `world` ranks.
void sweep(int world, const char* algo, const std::vector<Kind>& kinds, const std::vector<size_t>& sizes,
           size_t scratch = 0) {
  std::string uid = unique_test_id(std::string("co-") + algo);
  int cases = 0;
  for (Kind k : kinds) cases += int(std::size(kTypes) * (is_reducing(k) ? std::size(kOps) : 1) * sizes.size());
  HashTable hashes(world, cases);
  std::string fail = run_ranks(world, [&](int rank) {
    Communicator comm(uid, rank, world, peerlink::kHostDevice, opts(algo, scratch));
    Mem mem;
    int c = 0;
    for (Kind k : kinds)
      for (DataType t : kTypes)
        for (ReduceOp op : kOps) {
          if (!is_reducing(k) && op != ReduceOp::Sum) continue;
          for (size_t n : sizes) {
            int root = c % world;
            bool in_place = c % 3 == 1 && k != Kind::AllToAllV;
            std::string what = std::string(kind_name(k)) + " algo '" + algo + "' " + peerlink::to_string(t) + " " +
                               peerlink::to_string(op) + " count " + std::to_string(n) + " world " +
                               std::to_string(world) + " root " + std::to_string(root) + (in_place ? " in place" : "");
            hashes.put(rank, c, run_case(comm, mem, k, t, op, n, root, in_place, 7000 + c, what));
            ++c;
          }
        }
  });
  EXPECT_EQ(fail, "");
  EXPECT_EQ(hashes.mismatch(cases), "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

const std::vector<Kind> kAll = {Kind::AllGather, Kind::ReduceScatter, Kind::Broadcast,
                                Kind::Reduce,    Kind::AllToAll,      Kind::AllToAllV};
const std::vector<size_t> kSmall = {1, 3, 7, 33, 1001};  // every piece fits the host LL area (16 KB)

// One rank: every call is a copy of its one piece (collectives/one_rank.h), whichever path Options
// force.
TEST(CollectivesHost, OneRankAllKinds) {
  sweep(1, "", kAll, {1, 3, 1001, 100003});
  sweep(1, "push", kAll, {7});
  sweep(1, "two_hop", {Kind::Broadcast, Kind::Reduce}, {7});
}

// all_to_all_v on one rank: the piece goes from send_displs[0] to recv_displs[0], nothing else
// of recvbuf is written.
TEST(CollectivesHost, OneRankAllToAllVDisplacements) {
  std::string uid = unique_test_id("co-one-a2av");
  std::string fail = run_ranks(1, [&](int) {
    Communicator comm(uid, 0, 1, peerlink::kHostDevice, opts(""));
    std::vector<int32_t> in(40), out(40, -1);
    for (int i = 0; i < 40; ++i) in[i] = 1000 + i;
    const size_t sc = 5, sd = 7, rc = 5, rd = 30;
    peerlink::all_to_all_v(comm, in.data(), &sc, &sd, out.data(), &rc, &rd, DataType::I32, nullptr);
    for (int i = 0; i < 40; ++i)
      MP_CHECK_MSG(out[i] == (i >= 30 && i < 35 ? 1007 + (i - 30) : -1), "element " << i << " is " << out[i]);
  });
  EXPECT_EQ(fail, "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

TEST(CollectivesHost, LLAllKinds2Ranks) { sweep(2, "ll", kAll, kSmall); }
TEST(CollectivesHost, PushAllKinds2Ranks) { sweep(2, "push", kAll, {1, 3, 7, 33, 1001, 4099}); }
TEST(CollectivesHost, AutoAllKinds3Ranks) { sweep(3, "", kAll, {1, 5, 1001, 4099}); }
TEST(CollectivesHost, LLAllKinds4Ranks) { sweep(4, "ll", kAll, {1, 9, 301}); }
TEST(CollectivesHost, PushAllKinds4Ranks) { sweep(4, "push", kAll, {2, 301}); }
// Many steps per call: 1 KB scratch positions (64 f64 elements per chunk).
TEST(CollectivesHost, PushManySteps3Ranks) { sweep(3, "push", kAll, {63, 64, 65, 1001}, 1024); }
// More than one 1 MB chunk per piece with the default scratch.
TEST(CollectivesHost, PushTwoChunks2Ranks) {
  sweep(2, "", {Kind::AllGather, Kind::ReduceScatter, Kind::Broadcast, Kind::AllToAll}, {300001});
}
TEST(CollectivesHost, AutoAllKinds8Ranks) { sweep(8, "", kAll, {1, 17, 1001}); }
TEST(CollectivesHost, PushAllKinds5Ranks) { sweep(5, "push", kAll, {3, 77}, 256); }

// The two-hop plan of broadcast and reduce (coll_plan.h): 2-8 ranks, every root, in place and not;
// shards of one chunk and of many (256-byte scratch positions: 16 f64 per chunk, several blocks); counts below the rank count (empty shards) and shards that end mid-chunk. Auto takes it
// for 3+ ranks past the LL128 area (AutoAllKinds3Ranks' 4099 elements, AutoAllKinds8Ranks' 1001).
const std::vector<Kind> kRooted = {Kind::Broadcast, Kind::Reduce};
TEST(CollectivesHost, TwoHopRooted2Ranks) { sweep(2, "two_hop", kRooted, {1, 3, 33, 1001}, 256); }
// One step of data and the default 1 MB positions (the slots' earlier contents are allreduce's
// pushes of the same inputs, run_case's bitwise reference, so this alone would not see a read of
// the wrong slot; the many-chunk cases do).
TEST(CollectivesHost, TwoHopRootedOneChunk3Ranks) { sweep(3, "two_hop", kRooted, {5, 1001}); }
TEST(CollectivesHost, TwoHopRooted3Ranks) { sweep(3, "two_hop", kRooted, {1, 2, 7, 65, 1001, 4099}, 256); }
TEST(CollectivesHost, TwoHopRooted4Ranks) { sweep(4, "two_hop", kRooted, {3, 63, 100003}); }
TEST(CollectivesHost, TwoHopRooted5Ranks) { sweep(5, "two_hop", kRooted, {4, 77, 1001}, 256); }
TEST(CollectivesHost, TwoHopRooted8Ranks) { sweep(8, "two_hop", kRooted, {1, 13, 1001}, 256); }

// LL128 lines on SHM (16 KB pieces at most there): every kind, 2 and 4 ranks, sizes around the
// 120-byte line (f32 counts 29, 30, 31) up to the area; auto takes them for pieces of 4-16 KB.
TEST(CollectivesHost, LL128AllKinds2Ranks) { sweep(2, "ll128", kAll, {1, 29, 30, 31, 301, 2048}); }
TEST(CollectivesHost, LL128AllKinds4Ranks) { sweep(4, "ll128", kAll, {1, 31, 1001}); }

// Forced LL128 with a piece past the area, or with LL128 off: a typed error naming why, before
// anything moves; all_to_all_v ignores it (it always pushes).
TEST(CollectivesHost, LL128ForcedBeyondItsAreaIsInvalidArgument) {
  std::string uid = unique_test_id("coll-ll128");
  std::string fail = run_ranks(2, [&](int rank) {
    Communicator big(uid, rank, 2, peerlink::kHostDevice, opts("ll128"));
    const size_t n = 8192;  // 32 KB pieces: past the host's 16 KB LL128 area
    std::vector<float> in(n, 1.0f + rank), out(2 * n, -1.0f);
    MP_CHECK_THROWS(peerlink::all_gather(big, in.data(), out.data(), n, DataType::F32), peerlink::InvalidArgument,
                    "exceeds the LL128 area's 16384 bytes");
    MP_CHECK_MSG(out == std::vector<float>(2 * n, -1.0f), "all_gather wrote its output");
    std::vector<size_t> cnt(2, 4), dsp = {0, 4};
    peerlink::all_to_all_v(big, in.data(), cnt.data(), dsp.data(), out.data(), cnt.data(), dsp.data(), DataType::F32);
    MP_CHECK_MSG(out[0] == 1.0f && out[4] == 2.0f, "all_to_all_v: " << out[0] << " " << out[4]);
    Options o = opts("ll128");
    o.allreduce_ll128_max = 0;
    Communicator off(uid + "-off", rank, 2, peerlink::kHostDevice, o);
    MP_CHECK_THROWS(peerlink::all_gather(off, in.data(), out.data(), 4, DataType::F32), peerlink::InvalidArgument,
                    "no LL128 lines");
    off.barrier();  // the peer may still be mapping this rank's scratch (set up by the failed call)
  });
  EXPECT_EQ(fail, "");
}
}  // namespace
