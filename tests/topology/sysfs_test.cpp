// Discovery from fixture sysfs trees: GPU list, PCI path types, NUMA/socket, NVLink sources, and
// malformed or missing files (warning + conservative answer, never a crash).
#include <gtest/gtest.h>

#include "topology_test_util.h"

namespace peerlink::topology {
namespace {

using namespace testing;
using Rows = std::vector<std::string>;

std::map<std::string, std::vector<NvLinkPeer>> nvswitch_box(const std::vector<std::string>& buses) {
  std::map<std::string, std::vector<NvLinkPeer>> m;
  const std::pair<const char*, int> switches[] = {
      {"0000:05:00.0", 5}, {"0000:06:00.0", 4}, {"0000:07:00.0", 4}, {"0000:08:00.0", 5}};
  for (const std::string& b : buses)
    for (const auto& [sw, n] : switches) m[b].push_back({sw, NvLinkPeer::Kind::Switch, n});
  return m;
}

TEST(TopologySysfs, DgxH100NvSwitchAllPairsNvlink) {
  const std::vector<std::string> buses = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                                          "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"};
  const System s = probe_fixture("dgx_h100", fake_nvlinks(nvswitch_box(buses)));
  EXPECT_TRUE(s.warnings.empty()) << s.warnings.front();
  ASSERT_EQ(s.gpus.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(s.gpus[i].bus_id, buses[i]);
  EXPECT_EQ(s.cpu.generation, "SRP");
  for (size_t a = 0; a < 8; ++a)
    for (size_t b = 0; b < 8; ++b)
      if (a != b) { EXPECT_EQ(s.links[a][b].path, PathType::NVL) << a << "-" << b; }
  EXPECT_NE(s.links[0][5].detail.find("NVSwitch (18 links"), std::string::npos) << s.links[0][5].detail;
  Options o;
  for (const std::string& r : transport_matrix(o, s)) EXPECT_EQ(r.find('r'), std::string::npos) << r;
}

TEST(TopologySysfs, DgxH100WithoutNvlinkFallsBackToPcie) {
  const System s = probe_fixture("dgx_h100");
  ASSERT_EQ(s.gpus.size(), 8u);
  // Each GPU behind its own switch on its own root complex: PHB within a socket, SYS across.
  EXPECT_EQ(path_matrix(s)[0], "X PHB PHB PHB SYS SYS SYS SYS");
  EXPECT_EQ(path_matrix(s)[5], "SYS SYS SYS SYS PHB X PHB PHB");
  EXPECT_EQ(s.gpus[0].pci_nodes, std::vector<std::string>{"0000:16:00.0"});  // the switch's upstream port
  Options o;
  EXPECT_EQ(transport_matrix(o, s)[0], "X r r r r r r r");  // Intel default PXB
}

TEST(TopologySysfs, TurinEightGpusSameSocketDirectCrossSocketRelay) {
  const System s = probe_fixture("turin_8gpu");
  EXPECT_TRUE(s.warnings.empty());
  ASSERT_EQ(s.gpus.size(), 8u) << "the BMC VGA and the NVMe drive are not GPUs";
  EXPECT_EQ(s.cpu.vendor, "AuthenticAMD");
  EXPECT_EQ(s.cpu.family, 0x1A);
  EXPECT_EQ(s.cpu.generation, "Zen5");
  EXPECT_EQ(s.gpus[2].numa, 1);
  EXPECT_EQ(s.gpus[2].socket, 0) << "NPS2: NUMA node 1 is on socket 0";
  EXPECT_EQ(s.gpus[4].socket, 1);
  const Rows paths = {"X PHB PHB PHB SYS SYS SYS SYS", "PHB X PHB PHB SYS SYS SYS SYS", "PHB PHB X PHB SYS SYS SYS SYS",
                      "PHB PHB PHB X SYS SYS SYS SYS", "SYS SYS SYS SYS X PHB PHB PHB", "SYS SYS SYS SYS PHB X PHB PHB",
                      "SYS SYS SYS SYS PHB PHB X PHB", "SYS SYS SYS SYS PHB PHB PHB X"};
  EXPECT_EQ(path_matrix(s), paths);
  EXPECT_NE(s.links[0][2].detail.find("different root complexes pci0000:00 and pci0000:40 of CPU socket 0"),
            std::string::npos);
  Options o;
  EXPECT_EQ(p2p_level(o, s).level, PathType::PHB);
  const Rows t = transport_matrix(o, s);
  EXPECT_EQ(t[0], "X d d d r r r r");
  EXPECT_EQ(t[7], "r r r r d d d X");
  const Level l = p2p_level(o, s);
  const Decision d = decide(o, s, l, 1, 6, nullptr);
  EXPECT_FALSE(d.direct);
  EXPECT_NE(d.reason.find("PEERLINK_P2P_LEVEL=SYS would allow it"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("AMD x86 with 8 GPUs"), std::string::npos) << d.reason;
}

TEST(TopologySysfs, TurinTwoGpusAcrossSocketsDirect) {
  const System s = probe_fixture("turin_2gpu");
  ASSERT_EQ(s.gpus.size(), 2u);
  EXPECT_EQ(path_matrix(s)[0], "X SYS");
  Options o;
  EXPECT_EQ(p2p_level(o, s).level, PathType::SYS);
  EXPECT_EQ(transport_matrix(o, s)[0], "X d");
  o.p2p_level = "PHB";
  EXPECT_EQ(transport_matrix(o, s)[0], "X r");
}

TEST(TopologySysfs, IntelTwoSwitchesPixPxbPhb) {
  const System s = probe_fixture("intel_2switch");
  ASSERT_EQ(s.gpus.size(), 5u);
  const Rows paths = {"X PIX PXB PXB PHB", "PIX X PXB PXB PHB", "PXB PXB X PIX PHB", "PXB PXB PIX X PHB",
                      "PHB PHB PHB PHB X"};
  EXPECT_EQ(path_matrix(s), paths);
  Options o;
  const Rows t = {"X d d d r", "d X d d r", "d d X d r", "d d d X r", "r r r r X"};
  EXPECT_EQ(transport_matrix(o, s), t);
}

TEST(TopologySysfs, NvlinkBridgedPairsAcrossSockets) {
  auto bridge = [](const char* peer) { return std::vector<NvLinkPeer>{{peer, NvLinkPeer::Kind::Gpu, 4}}; };
  const System s = probe_fixture("nvlink_pairs_2socket", fake_nvlinks({{"0000:03:00.0", bridge("0000:04:00.0")},
                                                                       {"0000:04:00.0", bridge("0000:03:00.0")},
                                                                       {"0000:83:00.0", bridge("0000:84:00.0")},
                                                                       {"0000:84:00.0", bridge("0000:83:00.0")}}));
  const Rows paths = {"X NVL SYS SYS", "NVL X SYS SYS", "SYS SYS X NVL", "SYS SYS NVL X"};
  EXPECT_EQ(path_matrix(s), paths);
  EXPECT_EQ(s.cpu.generation, "SKL");
  Options o;
  const Rows t = {"X d r r", "d X r r", "r r X d", "r r d X"};
  EXPECT_EQ(transport_matrix(o, s), t);
  const Decision d = decide(o, s, p2p_level(o, s), 0, 1, nullptr);
  EXPECT_NE(d.reason.find("NVLink pairs are always direct"), std::string::npos);
  EXPECT_NE(d.reason.find("4 direct links"), std::string::npos) << d.reason;
}

TEST(TopologySysfs, FlatBusVmIsPhbNotGarbage) {
  const System s = probe_fixture("flat_vm");
  EXPECT_TRUE(s.warnings.empty());
  ASSERT_EQ(s.gpus.size(), 2u) << "the emulated VGA (vendor 0x1234) is not a GPU";
  EXPECT_EQ(s.gpus[0].numa, -1);
  EXPECT_EQ(s.gpus[0].socket, 0) << "one CPU package";
  EXPECT_EQ(s.gpus[0].host_bridge, "pci0000:00");
  EXPECT_TRUE(s.gpus[0].pci_nodes.empty());
  EXPECT_EQ(path_matrix(s)[0], "X PHB");
  Options o;
  EXPECT_EQ(transport_matrix(o, s)[0], "X r");  // Intel default PXB
  // The VM's GPUs linked by NVLink (as on an NVLink H200 pair) are direct.
  const System nv =
      probe_fixture("flat_vm", fake_nvlinks({{"0000:00:05.0", {{"0000:00:06.0", NvLinkPeer::Kind::Gpu, 18}}},
                                             {"0000:00:06.0", {{"0000:00:05.0", NvLinkPeer::Kind::Gpu, 18}}}}));
  EXPECT_EQ(path_matrix(nv)[0], "X NVL");
  EXPECT_EQ(transport_matrix(o, nv)[0], "X d");
}

TEST(TopologySysfs, NvlinkToUnknownGpuOrCpuIsIgnored) {
  // A link to a GPU we do not use (hidden) or to a CPU does not make a pair NVL.
  const System s = probe_fixture(
      "turin_2gpu",
      fake_nvlinks(
          {{"0000:01:00.0", {{"0000:99:00.0", NvLinkPeer::Kind::Gpu, 4}, {"cpu", NvLinkPeer::Kind::Other, 4}}},
           {"0000:81:00.0", {{"0000:99:00.0", NvLinkPeer::Kind::Gpu, 4}, {"cpu", NvLinkPeer::Kind::Other, 4}}}}));
  EXPECT_EQ(path_matrix(s)[0], "X SYS");
}

TEST(TopologySysfs, MissingRootGivesNoGpusAndAWarning) {
  ProbeOptions po;
  po.root = "/nonexistent/peerlink/root";
  const System s = probe_sysfs(po);
  EXPECT_TRUE(s.gpus.empty());
  EXPECT_TRUE(any_warning_contains(s, "does not exist"));
  Options o;
  const Decision d = decide(o, s, p2p_level(o, s), 0, 1, nullptr);
  EXPECT_FALSE(d.direct);
  EXPECT_NE(d.reason.find("not in the topology"), std::string::npos) << d.reason;
}

TEST(TopologySysfs, MalformedFilesWarnAndStayConservative) {
  TempDir t;
  ASSERT_FALSE(t.path().empty());
  const std::string dev = "sys/devices/pci0000:00/0000:00:01.0/";
  // GPU0: fine, but numa_node holds garbage. GPU1: class garbage (not a GPU). GPU2: broken link.
  t.write(dev + "0000:01:00.0/class", "0x030200");
  t.write(dev + "0000:01:00.0/vendor", "0x10de");
  t.write(dev + "0000:01:00.0/numa_node", "banana");
  t.symlink("sys/bus/pci/devices/0000:01:00.0", "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0");
  t.write(dev + "0000:02:00.0/class", "\x01\x02garbage");
  t.symlink("sys/bus/pci/devices/0000:02:00.0", "../../../devices/pci0000:00/0000:00:01.0/0000:02:00.0");
  t.symlink("sys/bus/pci/devices/0000:03:00.0", "../../../devices/pci0000:00/nowhere/0000:03:00.0");
  t.write("proc/cpuinfo", "vendor_id : \ncpu family : \x7f\n");
  ProbeOptions po;
  po.root = t.path();
  System s = probe_sysfs(po);
  ASSERT_EQ(s.gpus.size(), 1u);
  EXPECT_EQ(s.gpus[0].numa, -1);
  EXPECT_TRUE(any_warning_contains(s, "numa_node 'banana'"));
  EXPECT_EQ(s.cpu.generation, "unknown");

  // Now a GPU whose sysfs entry dangles: its PCI path is unknown, so every pair with it relays.
  t.write(dev + "0000:04:00.0/class", "0x030200");
  t.write(dev + "0000:04:00.0/vendor", "0x10de");
  s = probe_sysfs(po);  // 0000:04:00.0 has no bus/pci/devices link: not listed at all
  ASSERT_EQ(s.gpus.size(), 1u);
  ProbeOptions live_like = po;
  live_like.live = ProbeOptions::Live::No;
  System fake = probe_sysfs(live_like);
  Gpu ghost;
  ghost.index = 1;
  ghost.bus_id = "0000:03:00.0";
  fake.gpus.push_back(ghost);
  fake.links.assign(2, std::vector<Link>(2));
  fake.links[0][1] = fake.links[1][0] = pcie_link(fake.gpus[0], fake.gpus[1]);
  EXPECT_FALSE(fake.links[0][1].known);
  Options o;
  o.p2p_level = "PHB";
  Decision d = decide(o, fake, p2p_level(o, fake), 0, 1, nullptr);
  EXPECT_FALSE(d.direct);
  EXPECT_NE(d.reason.find("path unknown"), std::string::npos) << d.reason;
  o.p2p_level = "SYS";  // the user accepts anything
  d = decide(o, fake, p2p_level(o, fake), 0, 1, nullptr);
  EXPECT_TRUE(d.direct);
}

TEST(TopologySysfs, LinkOutsideTheTreeOrWithoutHostBridgeWarns) {
  TempDir t;
  t.write("sys/devices/0000:01:00.0/class", "0x030200");  // no pci0000:xx above it
  t.symlink("sys/bus/pci/devices/0000:01:00.0", "../../../devices/0000:01:00.0");
  t.write("elsewhere/0000:02:00.0/class", "0x030200");
  t.symlink("sys/bus/pci/devices/0000:02:00.0", "../../../../elsewhere/0000:02:00.0");
  ProbeOptions po;
  po.root = t.path();
  const System s = probe_sysfs(po);
  ASSERT_EQ(s.gpus.size(), 2u);
  EXPECT_FALSE(s.gpus[0].path_known);
  EXPECT_FALSE(s.gpus[1].path_known);
  EXPECT_TRUE(any_warning_contains(s, "no host bridge"));
  EXPECT_TRUE(any_warning_contains(s, "does not lead under"));
  EXPECT_EQ(path_matrix(s)[0], "X SYS?");
  Options o;
  EXPECT_EQ(transport_matrix(o, s)[0], "X r");
}

TEST(TopologySysfs, BusIdNormalization) {
  EXPECT_EQ(normalize_bus_id("00000000:1B:00.0"), "0000:1b:00.0");
  EXPECT_EQ(normalize_bus_id("0000:1b:00.0"), "0000:1b:00.0");
  EXPECT_EQ(normalize_bus_id("1b:00.0"), "0000:1b:00.0");
  EXPECT_EQ(normalize_bus_id("0001:c1:1f.7"), "0001:c1:1f.7");
  EXPECT_EQ(normalize_bus_id("pci0000:00"), "");
  EXPECT_EQ(normalize_bus_id("0000:1b:00.0x"), "");
  EXPECT_EQ(normalize_bus_id("0000:1b:20.0"), "");  // device > 0x1f
  EXPECT_EQ(normalize_bus_id(""), "");
}

}  // namespace
}  // namespace peerlink::topology
