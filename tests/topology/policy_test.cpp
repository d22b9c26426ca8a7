// The P2P policy: levels and env overrides through Options, NVLink, P2P disable, transport force,
// injected live checks, and the public entry points (decide_pair, explain) on XML fixtures.
#include <gtest/gtest.h>

#include <cstdlib>

#include "gpu/runtime.h"
#include "peerlink/errors.h"
#include "peerlink/topology.h"
#include "topology_test_util.h"

namespace peerlink::topology {
namespace {

using namespace testing;
using Rows = std::vector<std::string>;

TEST(TopologyPolicy, LevelNamesAndNcclNumbers) {
  const std::pair<const char*, PathType> ok[] = {
      {"LOC", PathType::LOC}, {"nvl", PathType::NVL},   {"NVB", PathType::NVL}, {"PIX", PathType::PIX},
      {"pxb", PathType::PXB}, {" PHB ", PathType::PHB}, {"SYS", PathType::SYS}, {"0", PathType::LOC},
      {"1", PathType::PIX},   {"2", PathType::PXB},     {"3", PathType::PHB},   {"4", PathType::SYS}};
  for (const auto& [text, want] : ok) {
    PathType got = PathType::NVL;
    EXPECT_TRUE(parse_level(text, &got)) << text;
    EXPECT_EQ(got, want) << text;
  }
  for (const char* bad : {"", "5", "-1", "PXN", "FOO", "12", "SYSX"}) {
    PathType got;
    EXPECT_FALSE(parse_level(bad, &got)) << bad;
  }
  const System s = probe_fixture("intel_2switch");
  Options o;
  o.p2p_level = "FOO";
  try {
    p2p_level(o, s);
    ADD_FAILURE() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("PEERLINK_P2P_LEVEL='FOO'"), std::string::npos) << e.what();
  }
}

TEST(TopologyPolicy, LevelOverridesOnIntelSwitches) {
  const System s = probe_fixture("intel_2switch");  // paths: PIX within a switch, PXB across, PHB to GPU4
  Options o;
  for (const char* pix : {"PIX", "1"}) {
    o.p2p_level = pix;
    EXPECT_EQ(transport_matrix(o, s), (Rows{"X d r r r", "d X r r r", "r r X d r", "r r d X r", "r r r r X"})) << pix;
  }
  for (const char* phb : {"PHB", "3", "SYS", "4"}) {
    o.p2p_level = phb;
    for (const std::string& r : transport_matrix(o, s)) EXPECT_EQ(r.find('r'), std::string::npos) << phb << ": " << r;
  }
  for (const char* none : {"LOC", "0", "NVL"}) {
    o.p2p_level = none;
    for (const std::string& r : transport_matrix(o, s)) EXPECT_EQ(r.find('d'), std::string::npos) << none << ": " << r;
  }
  o.p2p_level = "phb";
  const Decision d = decide(o, s, p2p_level(o, s), 0, 4, nullptr);
  EXPECT_TRUE(d.direct);
  EXPECT_NE(d.reason.find("PEERLINK_P2P_LEVEL=phb"), std::string::npos) << d.reason;
}

TEST(TopologyPolicy, NvlinkAlwaysDirectExceptLocAndDisable) {
  const System s = system_from_nccl_xml_file(xml_fixture("nvlink_pairs_2socket"));
  Options o;
  o.p2p_level = "NVL";
  EXPECT_EQ(transport_matrix(o, s), (Rows{"X d r r", "d X r r", "r r X d", "r r d X"}));
  o.p2p_level = "PIX";  // below every PCIe path here, NVLink still direct
  EXPECT_EQ(transport_matrix(o, s)[0], "X d r r");
  o.p2p_level = "LOC";
  EXPECT_EQ(transport_matrix(o, s)[0], "X r r r");
  o.p2p_level = "SYS";
  o.p2p_disable = true;
  EXPECT_EQ(transport_matrix(o, s)[0], "X r r r");
  const Decision d = decide(o, s, p2p_level(o, s), 0, 1, nullptr);
  EXPECT_NE(d.reason.find("PEERLINK_P2P_DISABLE=1"), std::string::npos) << d.reason;
  EXPECT_EQ(d.path, PathType::NVL);
}

TEST(TopologyPolicy, TransportForcesBothWays) {
  const System s = probe_fixture("turin_8gpu");
  Options o;
  o.path = Path::Relay;
  EXPECT_EQ(transport_matrix(o, s)[0], "X r r r r r r r");
  o.path = Path::Direct;
  EXPECT_EQ(transport_matrix(o, s)[0], "X d d d d d d d");
  EXPECT_NE(decide(o, s, p2p_level(o, s), 0, 5, nullptr).reason.find("PEERLINK_TRANSPORT=direct"), std::string::npos);
  o.p2p_disable = true;  // the safety switch wins
  EXPECT_EQ(transport_matrix(o, s)[0], "X r r r r r r r");
}

TEST(TopologyPolicy, LiveChecksOnlyForAllowedPairsAndTheyCanVeto) {
  const System s = probe_fixture("turin_8gpu");
  Options o;
  int copies = 0;
  LiveChecks live;
  live.can_access_peer = [](int a, int b) { return !(a == 2 && b == 3); };  // one direction refused
  live.copy_check = [&copies](int a, int b) -> std::string {
    ++copies;
    return (a == 0 && b == 1) ? "GPU0 -> GPU1: byte 4096 of 262144 is 0x00, expected 0x5b" : "";
  };
  const Rows t = transport_matrix(o, s, &live);
  EXPECT_EQ(t[0], "X r d d r r r r");
  EXPECT_EQ(t[2], "d d X r r r r r");
  // 8x7 ordered pairs, 24 same-socket ones are allowed by policy; the refused 2<->3 never copies.
  EXPECT_EQ(copies, 24 - 2);
  const Level l = p2p_level(o, s);
  Decision d = decide(o, s, l, 0, 1, &live);
  EXPECT_NE(d.reason.find("live P2P copy check failed: GPU0 -> GPU1: byte 4096"), std::string::npos) << d.reason;
  d = decide(o, s, l, 3, 2, &live);
  EXPECT_NE(d.reason.find("runtime reports no peer access GPU2 -> GPU3"), std::string::npos) << d.reason;
  d = decide(o, s, l, 0, 2, &live);
  EXPECT_TRUE(d.direct);
  EXPECT_NE(d.reason.find("live P2P copy check passed"), std::string::npos) << d.reason;
}

TEST(TopologyPolicy, RuntimeChecksWithoutGpuFailCleanly) {
  if (gpu::device_count() > 0) GTEST_SKIP() << "this test is about a machine without GPUs";
  const std::string err = runtime_copy_check(0, 1);
  EXPECT_FALSE(err.empty());
  EXPECT_NE(err.find("device 0 <-> device 1"), std::string::npos) << err;
  EXPECT_FALSE(runtime_live_checks().can_access_peer(0, 1));
}

TEST(TopologyPolicy, PublicDecidePairFromTopoFile) {
  Options o;
  o.log_level = LogLevel::None;
  o.topo_file = xml_fixture("turin_8gpu");
  PairDecision d = decide_pair(o, 0, 3);
  EXPECT_EQ(d.path, "PHB");
  EXPECT_TRUE(d.direct);
  EXPECT_FALSE(d.reason.empty());
  d = decide_pair(o, 3, 4);
  EXPECT_EQ(d.path, "SYS");
  EXPECT_FALSE(d.direct);
  EXPECT_EQ(decide_pair(o, 2, 2).path, "LOC");
  EXPECT_FALSE(decide_pair(o, 0, 8).direct);  // no such GPU: relay, no throw
  EXPECT_EQ(decide_all_pairs(o).size(), 28u);
  o.p2p_level = "bogus";
  EXPECT_THROW(decide_pair(o, 0, 1), InvalidArgument);
  o.p2p_level.clear();
  o.topo_file = "/nonexistent/topo.xml";  // warning + relay, never a throw
  EXPECT_FALSE(decide_pair(o, 0, 1).direct);
  o.topo_file = "";  // this machine (no GPUs in CI): an answer, no throw
  EXPECT_NO_THROW(decide_pair(o, 0, 1));
}

TEST(TopologyPolicy, JobPairsByBusIdCountTheJobsGpus) {
  Options o;
  o.log_level = LogLevel::None;
  o.topo_file = xml_fixture("turin_8gpu");
  // Three GPUs of the 8-GPU Turin box: AMD with > 2 GPUs, so same-socket only.
  std::vector<PairDecision> p = decide_job_pairs(o, {"0000:01:00.0", "00000000:41:00.0", "0000:C1:00.0"});
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].a, 0);
  EXPECT_EQ(p[0].b, 1);
  EXPECT_EQ(p[0].path, "PHB");
  EXPECT_TRUE(p[0].direct);
  EXPECT_EQ(p[1].path, "SYS");
  EXPECT_FALSE(p[1].direct);
  // A 2-GPU job across the sockets of the same box: AMD with <= 2 GPUs allows SYS.
  p = decide_job_pairs(o, {"0000:01:00.0", "0000:c1:00.0"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].path, "SYS");
  EXPECT_TRUE(p[0].direct) << p[0].reason;
  // A bus id the topology lacks, or garbage: that GPU's pairs relay.
  p = decide_job_pairs(o, {"0000:01:00.0", "0000:55:00.0", "garbage"});
  ASSERT_EQ(p.size(), 3u);
  for (const PairDecision& d : p) EXPECT_FALSE(d.direct) << d.reason;
  EXPECT_NE(p[0].reason.find("path unknown"), std::string::npos) << p[0].reason;
  o.topo_file.clear();  // this machine's sysfs; in CI no such GPUs: relay, no throw
  if (gpu::device_count() == 0) {
    p = decide_job_pairs(o, {"0000:fe:1f.0", "0000:fe:1e.0"});
    ASSERT_EQ(p.size(), 1u);
    EXPECT_FALSE(p[0].direct);
  }
  EXPECT_TRUE(decide_job_pairs(o, {}).empty());
}

TEST(TopologyPolicy, LiveChecksSkippedForGpusThisProcessCannotSee) {
  const System s = probe_fixture("turin_2gpu");
  Options o;
  LiveChecks live;
  live.applies = [](int, int) { return false; };
  live.can_access_peer = [](int, int) { return false; };
  live.copy_check = [](int, int) { return std::string("must not run"); };
  const Decision d = decide(o, s, p2p_level(o, s), 0, 1, &live);
  EXPECT_TRUE(d.direct);
  EXPECT_NE(d.reason.find("no live check"), std::string::npos) << d.reason;
}

TEST(TopologyPolicy, OptionsFromEnvDrivesTheDecision) {
  // Unset again even when an assertion below fails, so no other test sees these variables.
  struct Unset {
    ~Unset() {
      for (const char* v : {"PEERLINK_TOPO_FILE", "PEERLINK_P2P_LEVEL", "PEERLINK_P2P_DISABLE", "PEERLINK_DEBUG"})
        unsetenv(v);
    }
  } unset_at_exit;
  setenv("PEERLINK_TOPO_FILE", xml_fixture("intel_2switch").c_str(), 1);
  setenv("PEERLINK_P2P_LEVEL", "PHB", 1);
  setenv("PEERLINK_DEBUG", "NONE", 1);
  Options o = Options::from_env();
  EXPECT_TRUE(decide_pair(o, 0, 4).direct);
  setenv("PEERLINK_P2P_LEVEL", "2", 1);
  o = Options::from_env();
  EXPECT_FALSE(decide_pair(o, 0, 4).direct);
  EXPECT_TRUE(decide_pair(o, 0, 3).direct);
  setenv("PEERLINK_P2P_DISABLE", "1", 1);
  o = Options::from_env();
  EXPECT_FALSE(decide_pair(o, 0, 1).direct);
  EXPECT_NE(decide_pair(o, 0, 1).reason.find("PEERLINK_P2P_DISABLE=1"), std::string::npos);
}

TEST(TopologyPolicy, TopoFileChangesAreSeen) {
  TempDir t;
  const std::string path = t.path() + "/topo.xml";
  t.write("topo.xml",
          "<system version=\"1\"><cpu numaid=\"0\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"143\">"
          "<pci busid=\"0000:01:00.0\" class=\"0x030200\"><gpu dev=\"0\"/></pci>"
          "<pci busid=\"0000:02:00.0\" class=\"0x030200\"><gpu dev=\"1\"/></pci></cpu></system>");
  Options o;
  o.log_level = LogLevel::None;
  o.topo_file = path;
  EXPECT_EQ(decide_pair(o, 0, 1).path, "PHB");
  t.write("topo.xml",
          "<system version=\"1\"><cpu numaid=\"0\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"143\">"
          "<pci busid=\"0000:01:00.0\" class=\"0x030200\"><gpu dev=\"0\">"
          "<nvlink target=\"0000:02:00.0\" count=\"12\" tclass=\"0x030200\"/></gpu></pci>"
          "<pci busid=\"0000:02:00.0\" class=\"0x030200\"><gpu dev=\"1\"/></pci></cpu></system>");
  EXPECT_EQ(decide_pair(o, 0, 1).path, "NVL");
}

}  // namespace
}  // namespace peerlink::topology
