// The NVML path (dlopen, struct layout, link classification) against a fake libnvidia-ml built
// at test time with the compiler that built the tests: GPU01<->GPU02 bridged by 4 links, GPU03 and
// GPU04 on two NVSwitches (0a, 0b). Remote bus ids come back NVML-style ("00000000:0A:00.0").
#include <gtest/gtest.h>

#include "topology_test_util.h"

namespace peerlink::topology {
namespace {

using namespace testing;

const char* kFakeNvml = R"C(
#include <stdio.h>
#include <string.h>
typedef struct { char busIdLegacy[16]; unsigned domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32]; } PciInfo;
static const unsigned gpus[4] = {0x01, 0x02, 0x03, 0x04};
static const unsigned links[4][6] = {{2, 2, 2, 2, 0, 0}, {1, 1, 1, 1, 0, 0}, {0x0a, 0x0a, 0x0b, 0, 0, 0}, {0x0a, 0x0b, 0x0b, 0, 0, 0}};
static int initialized;
int nvmlInit_v2(void) { initialized = 1; return 0; }
#ifndef ONLY_INIT
int nvmlShutdown(void) { initialized = 0; return 0; }
int nvmlDeviceGetHandleByPciBusId_v2(const char* s, void** dev) {
  unsigned d, b, dv, f, i;
  if (!initialized) return 1;
  if (sscanf(s, "%x:%x:%x.%x", &d, &b, &dv, &f) != 4) return 2;
  for (i = 0; i < 4; ++i)
    if (gpus[i] == b) { *dev = (void*)(long)(i + 1); return 0; }
  return 6;
}
int nvmlDeviceGetNvLinkState(void* dev, unsigned link, int* active) {
  if (link >= 6) return 2;
  *active = links[(long)dev - 1][link] != 0;
  return 0;
}
int nvmlDeviceGetNvLinkRemotePciInfo_v2(void* dev, unsigned link, PciInfo* p) {
  memset(p, 0, sizeof *p);
  p->bus = links[(long)dev - 1][link];
  snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", p->bus);
  return 0;
}
#endif
#ifdef WITH_TYPE
int nvmlDeviceGetNvLinkRemoteDeviceType(void* dev, unsigned link, unsigned* t) {
  unsigned b = links[(long)dev - 1][link];
  *t = (b == 0x0a || b == 0x0b) ? 2 : 0;
  return 0;
}
#endif
)C";

// Builds the fake library with `defines`; "" when no compiler is at hand.
std::string build_fake(const TempDir& t, const std::string& name, const std::string& defines) {
  t.write("fake_nvml.c", kFakeNvml);
  const char* cxx = std::getenv("CXX");
  const std::string lib = t.path() + "/" + name;
  const std::string cmd = std::string(cxx && *cxx ? cxx : "g++") + " -x c -shared -fPIC " + defines + " -o '" + lib +
                          "' '" + t.path() + "/fake_nvml.c' 2>/dev/null";
  return std::system(cmd.c_str()) == 0 ? lib : "";
}

const std::vector<std::string> kBuses = {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0"};

TEST(TopologyNvml, FakeLibraryLinksAndSwitches) {
  TempDir t;
  for (const char* defines : {"", "-DWITH_TYPE"}) {
    const std::string lib = build_fake(t, std::string("libnvml") + (defines[0] ? "_typed" : "") + ".so", defines);
    if (lib.empty()) GTEST_SKIP() << "no C compiler to build the fake NVML";
    NvLinkTable table;
    std::string why;
    ASSERT_TRUE(nvml_nvlinks(kBuses, &table, &why, lib)) << why;
    ASSERT_EQ(table.size(), 4u);
    ASSERT_EQ(table[0].size(), 1u) << defines;
    EXPECT_EQ(table[0][0].remote, "0000:02:00.0");
    EXPECT_EQ(table[0][0].kind, NvLinkPeer::Kind::Gpu) << defines;
    EXPECT_EQ(table[0][0].count, 4);
    ASSERT_EQ(table[2].size(), 2u) << defines;
    EXPECT_EQ(table[2][0].remote, "0000:0a:00.0");
    EXPECT_EQ(table[2][0].kind, NvLinkPeer::Kind::Switch) << defines;
    EXPECT_EQ(table[2][0].count, 2);
    EXPECT_EQ(table[2][1].count, 1);

    System s;
    for (size_t i = 0; i < kBuses.size(); ++i) {
      Gpu g;
      g.index = static_cast<int>(i);
      g.bus_id = kBuses[i];
      g.host_bridge = "pci0000:00";
      g.path_known = true;
      s.gpus.push_back(g);
    }
    s.links.assign(4, std::vector<Link>(4, Link{PathType::PHB, true, "test"}));
    apply_nvlinks(&s, table, "NVLink (NVML)");
    EXPECT_EQ(path_matrix(s), (std::vector<std::string>{"X NVL PHB PHB", "NVL X PHB PHB", "PHB PHB X NVL",
                                                        "PHB PHB NVL X"}))
        << defines;
    EXPECT_NE(s.links[2][3].detail.find("through NVSwitch (3 links from GPU2)"), std::string::npos)
        << s.links[2][3].detail;
  }
}

TEST(TopologyNvml, MissingLibraryFunctionOrGpuIsACleanNo) {
  NvLinkTable table;
  std::string why;
  EXPECT_FALSE(nvml_nvlinks(kBuses, &table, &why, "/nonexistent/libnvidia-ml.so.1"));
  EXPECT_NE(why.find("not loadable"), std::string::npos) << why;
  TempDir t;
  const std::string partial = build_fake(t, "libpartial.so", "-DONLY_INIT");
  if (partial.empty()) GTEST_SKIP() << "no C compiler to build the fake NVML";
  EXPECT_FALSE(nvml_nvlinks(kBuses, &table, &why, partial));
  EXPECT_NE(why.find("lacks an NVLink function"), std::string::npos) << why;
  const std::string full = build_fake(t, "libfull.so", "");
  EXPECT_FALSE(nvml_nvlinks({"0000:01:00.0", "0000:77:00.0"}, &table, &why, full));
  EXPECT_NE(why.find("NVML does not know GPU 0000:77:00.0"), std::string::npos) << why;
}

}  // namespace
}  // namespace peerlink::topology
