// CPUID decoding from real register values, the generation table and NCCL's familyid encodings.
#include "topology/cpu.h"

#include <gtest/gtest.h>

namespace peerlink::topology {
namespace {

// CPUID leaf 0 ebx/edx/ecx as the CPUs return them.
constexpr uint32_t kAmdEbx = 0x68747541, kAmdEdx = 0x69746e65, kAmdEcx = 0x444d4163;        // "AuthenticAMD"
constexpr uint32_t kIntelEbx = 0x756e6547, kIntelEdx = 0x49656e69, kIntelEcx = 0x6c65746e;  // "GenuineIntel"

TEST(TopologyCpu, VendorFromLeaf0Registers) {
  EXPECT_EQ(cpuid_vendor(kAmdEbx, kAmdEdx, kAmdEcx), "AuthenticAMD");
  EXPECT_EQ(cpuid_vendor(kIntelEbx, kIntelEdx, kIntelEcx), "GenuineIntel");
}

struct Known {
  const char* name;
  uint32_t eax;
  int family, model;
};

TEST(TopologyCpu, FamilyModelFromRealLeaf1Eax) {
  const Known cases[] = {
      {"EPYC 9005 Turin (Zen5)", 0x00B00F21, 0x1A, 0x02},
      {"EPYC 7003 Milan (Zen3)", 0x00A00F11, 0x19, 0x01},
      {"EPYC 9004 Genoa (Zen4): extended model counts", 0x00A10F11, 0x19, 0x11},
      {"EPYC 7002 Rome (Zen2)", 0x00830F10, 0x17, 0x31},
      {"Xeon Sapphire Rapids", 0x000806F8, 0x06, 0x8F},
      {"Xeon Emerald Rapids", 0x000C06F2, 0x06, 0xCF},
      {"Xeon Skylake-SP", 0x00050654, 0x06, 0x55},
      {"Xeon Broadwell-EP", 0x000406F1, 0x06, 0x4F},
      {"Pentium 4 (base family 0xF, no extension)", 0x00000F29, 0x0F, 0x02},
      {"486: base family 4 ignores extended fields", 0x00FF0480, 0x04, 0x08},
  };
  for (const Known& k : cases) {
    int family = -1, model = -1;
    decode_family_model(k.eax, &family, &model);
    EXPECT_EQ(family, k.family) << k.name;
    EXPECT_EQ(model, k.model) << k.name;
  }
}

TEST(TopologyCpu, GenerationTableAndBandwidth) {
  struct G {
    uint32_t ebx, edx, ecx, eax;
    const char* gen;
    double gbps;
  } cases[] = {
      {kAmdEbx, kAmdEdx, kAmdEcx, 0x00B00F21, "Zen5", 32},
      {kAmdEbx, kAmdEdx, kAmdEcx, 0x00A10F11, "Zen3/4", 24},
      {kAmdEbx, kAmdEdx, kAmdEcx, 0x00A00F11, "Zen3/4", 24},
      {kAmdEbx, kAmdEdx, kAmdEcx, 0x00830F10, "Zen1/2", 16},
      {kIntelEbx, kIntelEdx, kIntelEcx, 0x000406F1, "BDW", 6},
      {kIntelEbx, kIntelEdx, kIntelEcx, 0x00050654, "SKL", 10},
      {kIntelEbx, kIntelEdx, kIntelEcx, 0x000806F8, "SRP", 22},
      {kIntelEbx, kIntelEdx, kIntelEcx, 0x000C06F2, "ERP", 40},
  };
  for (const G& g : cases) {
    const CpuInfo c = cpu_from_cpuid(g.ebx, g.ecx, g.edx, g.eax);
    EXPECT_EQ(c.generation, g.gen) << std::hex << g.eax;
    EXPECT_DOUBLE_EQ(c.inter_socket_gbps, g.gbps) << std::hex << g.eax;
    EXPECT_EQ(c.arch, "x86_64");
  }
}

TEST(TopologyCpu, UnknownCpuGetsConservativeEstimate) {
  // Granite Rapids (model 0xAD) is not in the table; Hygon and ARM are not either.
  const CpuInfo gnr = cpu_from_cpuid(kIntelEbx, kIntelEcx, kIntelEdx, 0x000A06D1);
  EXPECT_EQ(gnr.model, 0xAD);
  EXPECT_EQ(gnr.generation, "unknown");
  EXPECT_DOUBLE_EQ(gnr.inter_socket_gbps, kConservativeInterSocketGbps);
  CpuInfo arm;
  arm.arch = "aarch64";
  classify_generation(&arm);
  EXPECT_EQ(arm.generation, "unknown");
  EXPECT_DOUBLE_EQ(arm.inter_socket_gbps, kConservativeInterSocketGbps);
  EXPECT_FALSE(arm.is_amd_x86());
}

TEST(TopologyCpu, NcclFamilyIdBothEncodings) {
  // NCCL < 2.30: (extended family << 4) | base family.
  EXPECT_EQ(family_from_nccl_familyid(143), 0x17);
  EXPECT_EQ(family_from_nccl_familyid(175), 0x19);
  EXPECT_EQ(family_from_nccl_familyid(191), 0x1A);
  // Correct values.
  EXPECT_EQ(family_from_nccl_familyid(23), 0x17);
  EXPECT_EQ(family_from_nccl_familyid(25), 0x19);
  EXPECT_EQ(family_from_nccl_familyid(26), 0x1A);
  // Intel and old families are unaffected.
  EXPECT_EQ(family_from_nccl_familyid(6), 6);
  EXPECT_EQ(family_from_nccl_familyid(15), 15);
}

TEST(TopologyCpu, ProcCpuinfoText) {
  const CpuInfo c = cpu_from_proc_cpuinfo(
      "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC 9555\n\n"
      "processor\t: 1\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n");
  EXPECT_EQ(c.vendor, "AuthenticAMD");
  EXPECT_EQ(c.family, 0x1A);
  EXPECT_EQ(c.model, 2);
  EXPECT_EQ(c.generation, "Zen5");
  const CpuInfo bad = cpu_from_proc_cpuinfo("vendor_id : GenuineIntel\ncpu family : six\nmodel : \n");
  EXPECT_EQ(bad.family, -1);
  EXPECT_EQ(bad.generation, "unknown");
  EXPECT_EQ(cpu_from_proc_cpuinfo("").generation, "unknown");
}

TEST(TopologyCpu, ThisMachineDecodes) {
  const CpuInfo c = cpu_of_this_machine();
  EXPECT_FALSE(c.arch.empty());
#if defined(__x86_64__)
  EXPECT_FALSE(c.vendor.empty());
  EXPECT_GT(c.family, 0);
#endif
}

}  // namespace
}  // namespace peerlink::topology
