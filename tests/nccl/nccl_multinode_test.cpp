// Communicators across simulated nodes through the NCCL C API (host backend): forked ranks claim
// 2-3 hosts (UTS namespaces or PEERLINK_HOSTID, multinode_harness.h), meet through the unique id's
// rendezvous, and run every op in and out of place with exact payloads, on the layouts where the
// two-level plans apply (2x2 node-contiguous, 3x2), where only some do (2x2 round-robin), where
// none does (2+1, 2x1), and on one node (the control: peerlink only). The NCCL_DEBUG=INFO lines say
// which path each op took; the tests check them, so a plan that silently fell back would fail.
#include <sys/stat.h>

#include <cmath>

#include "multinode_harness.h"

namespace {

using mn::Claim;
using mn::Layout;

float val(int rank, size_t i, int seed) { return static_cast<float>((rank * 7 + i * 3 + seed) % 11 + 1); }

void fill(std::vector<float>& v, int rank, int seed, size_t offset = 0) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = val(rank, offset + i, seed);
}

#define CHECK_EQ_AT(got, want, what, i)                                                                        \
  do {                                                                                                        \
    if ((got) != (want))                                                                                      \
      throw std::runtime_error(std::string(what) + ": element " + std::to_string(i) + " is " +               \
                               std::to_string(got) + ", expected " + std::to_string(want) + " (line " +       \
                               std::to_string(__LINE__) + ")");                                               \
  } while (0)

struct Ctx {
  int rank, n, L;  // L: ranks per node of the layout's first node (counts are multiples or not of it)
  ncclComm_t c;
};

void allreduce_checks(const Ctx& x) {
  for (size_t count : {size_t(x.L) * 37, size_t(x.L) * 37 + 1}) {
    for (bool in_place : {false, true}) {
      std::vector<float> s(count), r(count, -1.0f);
      fill(s, x.rank, 1);
      float* out = in_place ? s.data() : r.data();
      CHECK_NCCL(ncclAllReduce(s.data(), out, count, ncclFloat, ncclSum, x.c, nullptr));
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int q = 0; q < x.n; ++q) want += val(q, i, 1);
        CHECK_EQ_AT(out[i], want, in_place ? "allreduce in place" : "allreduce", i);
      }
    }
  }
  std::vector<int32_t> a(x.L * 20), b(a.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>(val(x.rank, i, 2)) * (x.rank % 2 ? -1 : 1);
  CHECK_NCCL(ncclAllReduce(a.data(), b.data(), a.size(), ncclInt32, ncclMax, x.c, nullptr));
  for (size_t i = 0; i < a.size(); ++i) {
    int32_t want = INT32_MIN;
    for (int q = 0; q < x.n; ++q) want = std::max(want, static_cast<int32_t>(val(q, i, 2)) * (q % 2 ? -1 : 1));
    CHECK_EQ_AT(b[i], want, "allreduce int32 max", i);
  }
  // Integer average: NCCL's (sum, then divided toward zero), whole on the engine.
  CHECK_NCCL(ncclAllReduce(a.data(), b.data(), a.size(), ncclInt32, ncclAvg, x.c, nullptr));
  for (size_t i = 0; i < a.size(); ++i) {
    int64_t sum = 0;
    for (int q = 0; q < x.n; ++q) sum += static_cast<int32_t>(val(q, i, 2)) * (q % 2 ? -1 : 1);
    CHECK_EQ_AT(b[i], static_cast<int32_t>(sum / x.n), "allreduce int32 avg", i);
  }
  // int8 is no type of peerlink's: the real NCCL's, which the host backend has not.
  std::vector<int8_t> i8(16, 1), o8(16, 0);
  CHECK(ncclAllReduce(i8.data(), o8.data(), 16, ncclInt8, ncclSum, x.c, nullptr) == ncclInvalidUsage);
  CHECK(std::string(ncclGetLastError(x.c)).find("real NCCL") != std::string::npos);
}

void reduce_scatter_checks(const Ctx& x) {
  for (size_t rc : {size_t(5), size_t(64)}) {
    for (bool in_place : {false, true}) {
      std::vector<float> s(rc * x.n), r(rc, -1.0f);
      fill(s, x.rank, 3);
      float* out = in_place ? s.data() + x.rank * rc : r.data();
      CHECK_NCCL(ncclReduceScatter(s.data(), out, rc, ncclFloat, ncclSum, x.c, nullptr));
      for (size_t i = 0; i < rc; ++i) {
        float want = 0;
        for (int q = 0; q < x.n; ++q) want += val(q, x.rank * rc + i, 3);
        CHECK_EQ_AT(out[i], want, in_place ? "reduce_scatter in place" : "reduce_scatter", i);
      }
    }
  }
}

void all_gather_checks(const Ctx& x) {
  for (size_t c : {size_t(7), size_t(40)}) {
    for (bool in_place : {false, true}) {
      std::vector<float> s(c), r(c * x.n, -1.0f);
      fill(s, x.rank, 4);
      const float* src = s.data();
      if (in_place) {
        std::copy(s.begin(), s.end(), r.begin() + x.rank * c);
        src = r.data() + x.rank * c;
      }
      CHECK_NCCL(ncclAllGather(src, r.data(), c, ncclFloat, x.c, nullptr));
      for (int q = 0; q < x.n; ++q)
        for (size_t i = 0; i < c; ++i) CHECK_EQ_AT(r[q * c + i], val(q, i, 4), "all_gather", q * c + i);
    }
  }
  // An odd number of bytes per rank: data movement of any size.
  std::vector<uint8_t> s(3), r(3 * x.n, 0);
  for (size_t i = 0; i < 3; ++i) s[i] = static_cast<uint8_t>(x.rank * 10 + i + 1);
  CHECK_NCCL(ncclAllGather(s.data(), r.data(), 3, ncclUint8, x.c, nullptr));
  for (int q = 0; q < x.n; ++q)
    for (size_t i = 0; i < 3; ++i) CHECK_EQ_AT(r[q * 3 + i], q * 10 + i + 1, "all_gather uint8", q * 3 + i);
}

void rooted_checks(const Ctx& x) {
  for (int root : {x.n - 1, 1 % x.n}) {
    for (size_t count : {size_t(x.L) * 16, size_t(x.L) * 16 + 3}) {
      for (bool in_place : {false, true}) {
        std::vector<float> s(count), r(count, -1.0f);
        fill(s, x.rank, 5 + root);
        float* out = in_place ? s.data() : r.data();
        CHECK_NCCL(ncclBroadcast(s.data(), out, count, ncclFloat, root, x.c, nullptr));
        for (size_t i = 0; i < count; ++i) CHECK_EQ_AT(out[i], val(root, i, 5 + root), "broadcast", i);
        fill(s, x.rank, 6 + root);
        std::fill(r.begin(), r.end(), -1.0f);
        out = in_place ? s.data() : r.data();
        CHECK_NCCL(ncclReduce(s.data(), out, count, ncclFloat, ncclSum, root, x.c, nullptr));
        if (x.rank == root)
          for (size_t i = 0; i < count; ++i) {
            float want = 0;
            for (int q = 0; q < x.n; ++q) want += val(q, i, 6 + root);
            CHECK_EQ_AT(out[i], want, "reduce", i);
          }
      }
    }
    // Gather and scatter (in place at the root: its own block already in place).
    const size_t c = 9;
    std::vector<float> s(c), g(c * x.n, -1.0f);
    fill(s, x.rank, 7);
    if (x.rank == root) std::copy(s.begin(), s.end(), g.begin() + root * c);
    CHECK_NCCL(ncclGather(x.rank == root ? g.data() + root * c : s.data(), g.data(), c, ncclFloat, root, x.c, nullptr));
    if (x.rank == root)
      for (int q = 0; q < x.n; ++q)
        for (size_t i = 0; i < c; ++i) CHECK_EQ_AT(g[q * c + i], val(q, i, 7), "gather", q * c + i);
    std::vector<float> all(c * x.n), one(c, -1.0f);
    fill(all, x.rank, 8);
    CHECK_NCCL(ncclScatter(all.data(), one.data(), c, ncclFloat, root, x.c, nullptr));
    for (size_t i = 0; i < c; ++i) CHECK_EQ_AT(one[i], val(root, x.rank * c + i, 8), "scatter", i);
  }
}

void alltoall_checks(const Ctx& x) {
  const size_t c = 11;
  for (bool in_place : {false, true}) {
    std::vector<float> s(c * x.n), r(c * x.n, -1.0f);
    fill(s, x.rank, 9);
    float* out = in_place ? s.data() : r.data();
    CHECK_NCCL(ncclAlltoAll(s.data(), out, c, ncclFloat, x.c, nullptr));
    for (int q = 0; q < x.n; ++q)
      for (size_t i = 0; i < c; ++i) CHECK_EQ_AT(out[q * c + i], val(q, x.rank * c + i, 9), "alltoall", q * c + i);
  }
}

// A ring, all pairs (two messages per pair, in order), and a message to itself, in one group each.
void p2p_checks(const Ctx& x) {
  const size_t c = 13;
  const int next = (x.rank + 1) % x.n, prev = (x.rank + x.n - 1) % x.n;
  std::vector<float> s(c), r(c, -1.0f);
  fill(s, x.rank, 10);
  CHECK_NCCL(ncclGroupStart());
  CHECK_NCCL(ncclSend(s.data(), c, ncclFloat, next, x.c, nullptr));
  CHECK_NCCL(ncclRecv(r.data(), c, ncclFloat, prev, x.c, nullptr));
  CHECK_NCCL(ncclGroupEnd());
  for (size_t i = 0; i < c; ++i) CHECK_EQ_AT(r[i], val(prev, i, 10), "ring", i);
  std::vector<std::vector<float>> out(2 * x.n, std::vector<float>(c, -1.0f)), in(2 * x.n, std::vector<float>(c));
  CHECK_NCCL(ncclGroupStart());
  for (int q = 0; q < x.n; ++q)
    for (int k = 0; k < 2; ++k) {
      fill(in[2 * q + k], x.rank, 20 + 2 * q + k);  // to q, message k
      CHECK_NCCL(ncclSend(in[2 * q + k].data(), c, ncclFloat, q, x.c, nullptr));
      CHECK_NCCL(ncclRecv(out[2 * q + k].data(), c, ncclFloat, q, x.c, nullptr));
    }
  CHECK_NCCL(ncclGroupEnd());
  for (int q = 0; q < x.n; ++q)
    for (int k = 0; k < 2; ++k)
      for (size_t i = 0; i < c; ++i) CHECK_EQ_AT(out[2 * q + k][i], val(q, i, 20 + 2 * x.rank + k), "all pairs", i);
}

// Every op with exact payloads; then which path each took, from this rank's INFO lines.
void op_suite(const Ctx& x, const std::string& log, const std::vector<std::string>& expect_paths) {
  allreduce_checks(x);
  reduce_scatter_checks(x);
  all_gather_checks(x);
  rooted_checks(x);
  alltoall_checks(x);
  p2p_checks(x);
  std::fflush(stderr);
  std::string text = mn::read_file(log);
  for (const std::string& want : expect_paths)
    if (text.find(want) == std::string::npos)
      throw std::runtime_error("rank " + std::to_string(x.rank) + ": no INFO line with '" + want + "'");
}

void run_suite(const Layout& l, const std::vector<std::string>& expect_paths,
               std::vector<std::pair<std::string, std::string>> env = {}) {
  if (l.claim == Claim::Uts && !mn::uts_available()) GTEST_SKIP() << "no UTS namespaces (needs root)";
  env.push_back({"NCCL_DEBUG", "INFO"});
  bool has_min = false;
  for (auto& kv : env) has_min = has_min || kv.first == "PEERLINK_HIER_MIN_BYTES";
  if (!has_min) env.push_back({"PEERLINK_HIER_MIN_BYTES", "1"});  // the plans on every size the tests use
  const std::string dir = "/tmp/pl-mn-" + std::to_string(getpid());
  mkdir(dir.c_str(), 0700);
  int L = 0;
  for (int k : l.node_of) L += k == 0;
  std::string err = mn::run_layout(l, env, [&](int rank, ncclComm_t& c) {
    op_suite(Ctx{rank, l.nranks(), L, c}, dir + "/rank" + std::to_string(rank) + ".log", expect_paths);
  }, 120, dir);
  EXPECT_EQ(err, "") << l.name;
  if (!err.empty() || ::testing::Test::HasFailure())
    for (int r = 0; r < l.nranks(); ++r)
      std::fprintf(stderr, "---- %s rank %d log (tail)\n%s\n", l.name, r,
                   mn::read_file(dir + "/rank" + std::to_string(r) + ".log").substr(0, 6000).c_str());
  for (int r = 0; r < l.nranks(); ++r) unlink((dir + "/rank" + std::to_string(r) + ".log").c_str());
  rmdir(dir.c_str());
}

const char* kTwoLevelAr = "ncclAllReduce -> two-level: peerlink reduce_scatter, allreduce of each shard among the rail";
const char* kTwoLevelRs = "ncclReduceScatter -> two-level";
const char* kTwoLevelAg = "ncclAllGather -> two-level";
const char* kTwoLevelBc = "ncclBroadcast -> two-level";
const char* kTwoLevelRe = "ncclReduce -> two-level";
const char* kIndivisible = "ncclAllReduce -> whole on the inter-node engine (count not divisible by the ranks per node)";
const char* kIntAvg = "ncclAllReduce -> whole on the inter-node engine (integer average)";
const char* kLocalSend = "ncclSend -> peerlink send (a peer of this node)";
const char* kRemoteSend = "ncclSend -> the inter-node engine's send (a peer on another node)";

}  // namespace

TEST(NcclMultinode, TwoNodesTwoRanksContiguous) {
  run_suite({"2x2", {0, 0, 1, 1}, 0, Claim::Uts},
            {"node map (rendezvous at", "2 nodes x 2 ranks, node-contiguous", "rails of 2 ranks", kTwoLevelAr,
             kTwoLevelRs, kTwoLevelAg, kTwoLevelBc, kTwoLevelRe, kIndivisible, kIntAvg, kLocalSend, kRemoteSend,
             "ncclAlltoAll -> send/recv per peer"});
}

TEST(NcclMultinode, TwoNodesRoundRobinIdFromSecondNode) {
  run_suite({"2x2 round-robin", {0, 1, 0, 1}, 1, Claim::HostId},
            {"2 nodes x 2 ranks, not node-contiguous", kTwoLevelAr, kTwoLevelBc, kTwoLevelRe,
             "ncclReduceScatter -> whole on the inter-node engine (ranks not node-contiguous)",
             "ncclAllGather -> whole on the inter-node engine (ranks not node-contiguous)", kLocalSend, kRemoteSend});
}

TEST(NcclMultinode, UnevenTwoPlusOne) {
  run_suite({"2+1", {0, 0, 1}, 2, Claim::Uts},
            {"2 nodes, uneven (3 ranks)", "every collective whole on it (uneven ranks per node)",
             "ncclAllReduce -> whole on the inter-node engine (uneven ranks per node)", kLocalSend, kRemoteSend});
}

TEST(NcclMultinode, TwoNodesOneRankEach) {
  run_suite({"2x1", {0, 1}, 0, Claim::HostId},
            {"2 nodes x 1 rank", "ncclAllReduce -> whole on the inter-node engine (one rank per node)", kRemoteSend});
}

TEST(NcclMultinode, ThreeNodesTwoRanks) {
  run_suite({"3x2", {0, 0, 1, 1, 2, 2}, 3, Claim::Uts},
            {"3 nodes x 2 ranks, node-contiguous", "rails of 3 ranks", kTwoLevelAr, kTwoLevelRs, kTwoLevelAg,
             kTwoLevelBc, kTwoLevelRe, kLocalSend, kRemoteSend});
}

// The threshold: below PEERLINK_HIER_MIN_BYTES the whole op runs on the engine.
TEST(NcclMultinode, BelowThresholdWholeOnEngine) {
  run_suite({"2x2 threshold", {0, 0, 1, 1}, 0, Claim::HostId},
            {"ncclAllReduce -> whole on the inter-node engine (below PEERLINK_HIER_MIN_BYTES)"},
            {{"PEERLINK_HIER_MIN_BYTES", "1048576"}});
}

// The default: two-level collectives off, every collective whole on the engine; send/recv still
// by peer.
TEST(NcclMultinode, TwoLevelOffByDefault) {
  run_suite({"2x2 default", {0, 0, 1, 1}, 0, Claim::HostId},
            {"two-level collectives off (PEERLINK_HIER_MIN_BYTES=0)",
             "ncclAllReduce -> whole on the inter-node engine (two-level plans off: PEERLINK_HIER_MIN_BYTES=0)",
             kLocalSend, kRemoteSend},
            {{"PEERLINK_HIER_MIN_BYTES", "0"}});
}

// The control: every rank on one node is a plain peerlink communicator, as before.
TEST(NcclMultinode, OneNodeIsPeerlinkOnly) {
  run_suite({"1x3", {0, 0, 0}, 1, Claim::Uts},
            {"1 node x 3 ranks", "peerlink (all ranks on one node)", "ncclAllReduce -> peerlink allreduce",
             "ncclSend -> peerlink send"});
}
