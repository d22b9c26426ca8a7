// ncclCommSplit and ncclCommShrink of communicators across simulated nodes (host backend): the
// children's node maps follow from the parent's without a new meeting; a child inside one node runs
// on peerlink only, one across nodes on both sides. Splits by node, by local index, with
// NCCL_SPLIT_NOCOLOR and reversed keys, a split of a child, and shrinks to uneven and to one node;
// payloads verified on every child.
#include <sys/stat.h>

#include "multinode_harness.h"

namespace {

using mn::Claim;
using mn::Layout;

// An allreduce and an alltoall on `c`, payloads checked against the child's own numbering.
void verify(ncclComm_t c, const char* what) {
  int n = 0, r = -1;
  CHECK_NCCL(ncclCommCount(c, &n));
  CHECK_NCCL(ncclCommUserRank(c, &r));
  std::vector<float> a(4 * 6), b(a.size(), -1.0f);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(r * 10 + i % 7 + 1);
  CHECK_NCCL(ncclAllReduce(a.data(), b.data(), a.size(), ncclFloat, ncclSum, c, nullptr));
  for (size_t i = 0; i < a.size(); ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += static_cast<float>(q * 10 + i % 7 + 1);
    if (b[i] != want)
      throw std::runtime_error(std::string(what) + ": allreduce element " + std::to_string(i) + " is " +
                               std::to_string(b[i]) + ", expected " + std::to_string(want));
  }
  std::vector<int> s(3 * n), t(3 * n, -1);
  for (int i = 0; i < 3 * n; ++i) s[i] = r * 1000 + i;
  CHECK_NCCL(ncclAlltoAll(s.data(), t.data(), 3, ncclInt32, c, nullptr));
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < 3; ++i)
      if (t[q * 3 + i] != q * 1000 + r * 3 + i) throw std::runtime_error(std::string(what) + ": alltoall wrong");
}

void expect_log(const std::string& log, int rank, std::initializer_list<const char*> parts) {
  std::fflush(stderr);
  std::string text = mn::read_file(log);
  for (const char* p : parts)
    if (text.find(p) == std::string::npos)
      throw std::runtime_error("rank " + std::to_string(rank) + ": no INFO line with '" + p + "'");
}

struct LogDir {
  std::string path = "/tmp/pl-mn-split-" + std::to_string(getpid());
  LogDir() { mkdir(path.c_str(), 0700); }
  ~LogDir() {
    for (int r = 0; r < 8; ++r) unlink((path + "/rank" + std::to_string(r) + ".log").c_str());
    rmdir(path.c_str());
  }
  std::string of(int rank) const { return path + "/rank" + std::to_string(rank) + ".log"; }
};

}  // namespace

// 3 nodes x 2 ranks: by node (one-node children: peerlink), by local index (3 x 1 children), and
// nodes 0-1 only with reversed keys (a 2 x 2 child, node 2 NOCOLOR), which is split again by node.
TEST(NcclMultinodeSplit, ByNodeByLocalIndexAndNoColor) {
  if (!mn::uts_available()) GTEST_SKIP() << "no UTS namespaces (needs root)";
  LogDir logs;
  std::string err = mn::run_layout({"3x2 split", {0, 0, 1, 1, 2, 2}, 0, Claim::Uts},
                                   {{"NCCL_DEBUG", "INFO"}, {"PEERLINK_HIER_MIN_BYTES", "1"}},
                                   [&](int rank, ncclComm_t& c) {
    const int node = rank / 2, local = rank % 2;
    ncclComm_t by_node = nullptr, by_local = nullptr, two_nodes = nullptr, grand = nullptr;
    CHECK_NCCL(ncclCommSplit(c, node, rank, &by_node, nullptr));
    verify(by_node, "split by node");
    CHECK_NCCL(ncclCommSplit(c, local, rank, &by_local, nullptr));
    verify(by_local, "split by local index");
    CHECK_NCCL(ncclCommSplit(c, node < 2 ? 7 : NCCL_SPLIT_NOCOLOR, -rank, &two_nodes, nullptr));
    if (node == 2) {
      CHECK(two_nodes == nullptr);
    } else {
      int r = -1;
      CHECK_NCCL(ncclCommUserRank(two_nodes, &r));
      CHECK(r == 3 - rank);  // keys reversed
      verify(two_nodes, "split of nodes 0-1");
      CHECK_NCCL(ncclCommSplit(two_nodes, node, 0, &grand, nullptr));
      verify(grand, "split of the split");
      CHECK_NCCL(ncclCommDestroy(grand));
      CHECK_NCCL(ncclCommDestroy(two_nodes));
    }
    CHECK_NCCL(ncclCommDestroy(by_local));
    CHECK_NCCL(ncclCommDestroy(by_node));
    verify(c, "parent after the splits");
    expect_log(logs.of(rank), rank,
               {"ncclCommSplit: peerlink (all ranks on one node)", "ncclCommSplit: 3 nodes x 1 rank",
                "whole on the inter-node engine (one rank per node)"});
    if (node < 2) expect_log(logs.of(rank), rank, {"ncclCommSplit: 2 nodes x 2 ranks, node-contiguous", "two-level"});
  }, 120, logs.path);
  EXPECT_EQ(err, "");
}

// 2 x 2, shrunk by rank 3 (a 2+1 child: uneven, whole on the engine) and by ranks 2 and 3 (the
// survivors share node 0: a peerlink child). The excluded ranks do not call.
TEST(NcclMultinodeSplit, ShrinkToUnevenAndToOneNode) {
  std::string err = mn::run_layout({"2x2 shrink", {0, 0, 1, 1}, 0, Claim::HostId}, {{"PEERLINK_HIER_MIN_BYTES", "1"}},
                                   [&](int rank, ncclComm_t& c) {
    int three = 3;
    if (rank != 3) {
      ncclComm_t s = nullptr;
      CHECK_NCCL(ncclCommShrink(c, &three, 1, &s, nullptr, NCCL_SHRINK_DEFAULT));
      verify(s, "shrunk by rank 3");
      CHECK_NCCL(ncclCommDestroy(s));
    }
    int two_three[2] = {2, 3};
    if (rank < 2) {
      ncclComm_t s = nullptr;
      CHECK_NCCL(ncclCommShrink(c, two_three, 2, &s, nullptr, NCCL_SHRINK_DEFAULT));
      verify(s, "shrunk to node 0");
      CHECK_NCCL(ncclCommDestroy(s));
    }
    verify(c, "parent after the shrinks");
  });
  EXPECT_EQ(err, "");
}
