// The transport's per-pair path choice (transport/path_policy.h): which pairs count as NVLink (or
// one GPU), the condition for the collectives' LL128 lines. XML fixture: GPUs 03/04 and 83/84 are
// NVLink pairs, the two sockets are joined by SYS only.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "topology_test_util.h"
#include "transport/path_policy.h"

namespace peerlink::detail {
namespace {

TEST(PathChoice, NvlinkOnlyForNvlinkPairsAndOneGpu) {
  Options o;
  o.topo_file = topology::testing::xml_fixture("nvlink_pairs_2socket");
  // Ranks: 0 on 03, 1 on 04 (NVLink), 2 on 83 (other socket), 3 on 03 again (same GPU), 4 host memory.
  const std::vector<std::string> ids = {"0000:03:00.0", "0000:04:00.0", "0000:83:00.0", "0000:03:00.0", ""};
  std::vector<PathChoice> c = choose_paths(o, 0, ids);
  ASSERT_EQ(c.size(), ids.size());
  EXPECT_TRUE(c[1].nvlink) << c[1].reason;
  EXPECT_EQ(c[1].path, Path::Direct) << c[1].reason;
  EXPECT_FALSE(c[2].nvlink) << c[2].reason;
  EXPECT_TRUE(c[3].nvlink) << c[3].reason;
  EXPECT_FALSE(c[4].nvlink) << c[4].reason;
  // A forced path does not look at the link: no pair counts as NVLink.
  o.path = Path::Direct;
  for (const PathChoice& f : choose_paths(o, 0, ids)) EXPECT_FALSE(f.nvlink) << f.reason;
  o.path = Path::Auto;
  o.p2p_disable = true;
  for (const PathChoice& f : choose_paths(o, 0, ids)) EXPECT_FALSE(f.nvlink) << f.reason;
}

}  // namespace
}  // namespace peerlink::detail
