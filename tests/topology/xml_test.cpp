// NCCL topology XML: the fixtures (same answers as the matching sysfs trees), both familyid
// encodings, the reader's edge cases, and malformed input (warning + conservative, never a crash).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "topology/cpu.h"
#include "topology/xml_reader.h"
#include "topology_test_util.h"

namespace peerlink::topology {
namespace {

using namespace testing;
using Rows = std::vector<std::string>;

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

TEST(TopologyXml, DgxH100AllPairsNvlinkThroughNvswitch) {
  const System s = system_from_nccl_xml_file(xml_fixture("dgx_h100"));
  EXPECT_TRUE(s.warnings.empty()) << s.warnings.front();
  ASSERT_EQ(s.gpus.size(), 8u);
  EXPECT_EQ(s.gpus[7].bus_id, "0000:db:00.0");
  EXPECT_EQ(s.gpus[7].numa, 1);
  EXPECT_EQ(s.cpu.generation, "SRP");
  for (const std::string& r : path_matrix(s)) EXPECT_EQ(r.find("P"), std::string::npos) << r;  // no PIX/PXB/PHB
  for (const std::string& r : path_matrix(s)) EXPECT_EQ(r.find("SYS"), std::string::npos) << r;
  EXPECT_NE(s.links[0][7].detail.find("NVSwitch (18 links"), std::string::npos) << s.links[0][7].detail;
  Options o;
  for (const std::string& r : transport_matrix(o, s)) EXPECT_EQ(r.find('r'), std::string::npos) << r;
  o.p2p_disable = true;
  for (const std::string& r : transport_matrix(o, s)) EXPECT_EQ(r.find('d'), std::string::npos) << r;
}

TEST(TopologyXml, TurinEightGpusBuggyAndCorrectFamilyId) {
  const std::string text = slurp(xml_fixture("turin_8gpu"));
  ASSERT_NE(text.find("familyid=\"191\""), std::string::npos);
  for (const std::string& variant : {text, replace_all(text, "familyid=\"191\"", "familyid=\"26\"")}) {
    const System s = system_from_nccl_xml_text(variant, "turin_8gpu.xml");
    EXPECT_TRUE(s.warnings.empty());
    EXPECT_EQ(s.cpu.family, 0x1A);
    EXPECT_EQ(s.cpu.model, 2);
    EXPECT_EQ(s.cpu.generation, "Zen5");
    EXPECT_DOUBLE_EQ(s.cpu.inter_socket_gbps, 32);
    ASSERT_EQ(s.gpus.size(), 8u);
    Options o;
    EXPECT_EQ(p2p_level(o, s).level, PathType::PHB);
    EXPECT_EQ(transport_matrix(o, s)[0], "X d d d r r r r");
    // Same answers as probing the same box from sysfs.
    EXPECT_EQ(path_matrix(s), path_matrix(probe_fixture("turin_8gpu")));
  }
  // Zen3 (Milan) written both ways.
  for (const char* fam : {"175", "25"}) {
    const System s =
        system_from_nccl_xml_text(replace_all(text, "familyid=\"191\"", std::string("familyid=\"") + fam + "\""), "x");
    EXPECT_EQ(s.cpu.family, 0x19) << fam;
    EXPECT_EQ(s.cpu.generation, "Zen3/4") << fam;
  }
  for (const char* fam : {"143", "23"}) {
    const System s =
        system_from_nccl_xml_text(replace_all(text, "familyid=\"191\"", std::string("familyid=\"") + fam + "\""), "x");
    EXPECT_EQ(s.cpu.family, 0x17) << fam;
  }
}

TEST(TopologyXml, SameAnswersAsSysfsForEveryFixture) {
  auto bridge = [](const char* peer) { return std::vector<NvLinkPeer>{{peer, NvLinkPeer::Kind::Gpu, 4}}; };
  const System nvl = probe_fixture("nvlink_pairs_2socket", fake_nvlinks({{"0000:03:00.0", bridge("0000:04:00.0")},
                                                                         {"0000:04:00.0", bridge("0000:03:00.0")},
                                                                         {"0000:83:00.0", bridge("0000:84:00.0")},
                                                                         {"0000:84:00.0", bridge("0000:83:00.0")}}));
  EXPECT_EQ(path_matrix(system_from_nccl_xml_file(xml_fixture("nvlink_pairs_2socket"))), path_matrix(nvl));
  for (const char* name : {"turin_2gpu", "intel_2switch", "flat_vm"}) {
    const System x = system_from_nccl_xml_file(xml_fixture(name));
    const System f = probe_fixture(name);
    EXPECT_TRUE(x.warnings.empty()) << name;
    EXPECT_EQ(path_matrix(x), path_matrix(f)) << name;
    Options o;
    EXPECT_EQ(transport_matrix(o, x), transport_matrix(o, f)) << name;
    EXPECT_EQ(x.cpu.generation, f.cpu.generation) << name;
    ASSERT_EQ(x.gpus.size(), f.gpus.size());
    for (size_t i = 0; i < x.gpus.size(); ++i) EXPECT_EQ(x.gpus[i].bus_id, f.gpus[i].bus_id) << name;
  }
  const Rows paths = {"X PIX PXB PXB PHB", "PIX X PXB PXB PHB", "PXB PXB X PIX PHB", "PXB PXB PIX X PHB",
                      "PHB PHB PHB PHB X"};
  EXPECT_EQ(path_matrix(system_from_nccl_xml_file(xml_fixture("intel_2switch"))), paths);
}

TEST(TopologyXml, GpuOrderFollowsDevAttribute) {
  const System s = system_from_nccl_xml_text(
      "<system version=\"1\"><cpu numaid=\"0\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"143\">"
      "<pci busid=\"0000:05:00.0\" class=\"0x030200\"><gpu dev=\"1\"/></pci>"
      "<pci busid=\"0000:09:00.0\" class=\"0x030200\"><gpu dev=\"0\"/></pci></cpu></system>",
      "order.xml");
  ASSERT_EQ(s.gpus.size(), 2u);
  EXPECT_EQ(s.gpus[0].bus_id, "0000:09:00.0");
  EXPECT_EQ(s.gpus[1].bus_id, "0000:05:00.0");
}

TEST(TopologyXml, ReaderHandlesCommentsPrologQuotesEntities) {
  const XmlParse p = parse_xml(
      "\xEF\xBB\xBF<?xml version=\"1.0\"?>\n<!-- dumped by NCCL -->\n<system version='1'>\n"
      "  <cpu vendor=\"A&amp;B &lt;&#65;&#x42;&gt;\" x = \"1\">text is ignored<!-- c --></cpu>\n</system>\n");
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.root.name, "system");
  ASSERT_EQ(p.root.children.size(), 1u);
  EXPECT_EQ(*p.root.children[0].attr("vendor"), "A&B <AB>");
  EXPECT_EQ(*p.root.children[0].attr("x"), "1");
  EXPECT_EQ(p.root.children[0].line, 4);
  EXPECT_EQ(p.root.attr("missing"), nullptr);
}

TEST(TopologyXml, MalformedInputWarnsAndRelaysNeverCrashes) {
  const std::string dgx = slurp(xml_fixture("dgx_h100"));
  std::string deep;
  for (int i = 0; i < 10000; ++i) deep += "<pci>";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", ""},
      {"truncated tag", "<system"},
      {"unclosed", "<system version=\"1\"><cpu numaid=\"0\">"},
      {"mismatched", "<system><cpu></system>"},
      {"truncated real file", dgx.substr(0, dgx.size() / 2)},
      {"unquoted attribute", "<system version=1></system>"},
      {"bad entity", "<system a=\"&bogus;\"></system>"},
      {"deep nesting", "<system>" + deep},
      {"doctype", "<!DOCTYPE x [<!ENTITY a \"b\">]><system/>"},
      {"two roots", "<system/><system/>"},
      {"binary", std::string("\x00\xff\xfe<\x01>", 6)},
      {"unterminated comment", "<system><!-- </system>"},
      {"text outside", "hello <system/>"},
  };
  for (const auto& [name, text] : cases) {
    const System s = system_from_nccl_xml_text(text, name);
    EXPECT_TRUE(s.gpus.empty()) << name;
    ASSERT_FALSE(s.warnings.empty()) << name;
    EXPECT_NE(s.warnings[0].find("malformed XML"), std::string::npos) << name << ": " << s.warnings[0];
    Options o;
    const Decision d = decide(o, s, p2p_level(o, s), 0, 1, nullptr);
    EXPECT_FALSE(d.direct) << name;
    EXPECT_EQ(s.cpu.inter_socket_gbps, kConservativeInterSocketGbps) << name;
  }
}

TEST(TopologyXml, WellFormedButWrongContentWarns) {
  System s = system_from_nccl_xml_text("<topology/>", "other.xml");
  EXPECT_TRUE(s.gpus.empty());
  EXPECT_TRUE(any_warning_contains(s, "not <system>"));

  s = system_from_nccl_xml_text(
      "<system version=\"2\"><cpu numaid=\"x\" vendor=\"AuthenticAMD\" familyid=\"abc\" modelid=\"1\">"
      "<pci class=\"0x030200\"><gpu dev=\"0\"/></pci>"
      "<pci busid=\"0000:41:00.0\" class=\"0x030200\"><gpu dev=\"zero\"><nvlink target=\"0000:81:00.0\" "
      "count=\"many\"/>"
      "<nvlink count=\"2\"/></gpu></pci></cpu>"
      "<cpu numaid=\"1\"><pci busid=\"0000:81:00.0\" class=\"0x030200\"><gpu dev=\"1\"/></pci></cpu></system>",
      "odd.xml");
  for (const char* w : {"version '2'", "without a valid numaid", "familyid 'abc'", "GPU without a valid busid",
                        "dev 'zero'", "count 'many'", "nvlink without target"})
    EXPECT_TRUE(any_warning_contains(s, w)) << w;
  ASSERT_EQ(s.gpus.size(), 2u);  // the GPU without busid is dropped
  EXPECT_EQ(s.cpu.family, -1);
  EXPECT_EQ(path_matrix(s)[0], "X SYS");  // the bad nvlink was ignored
  Options o;
  EXPECT_EQ(p2p_level(o, s).level, PathType::SYS);  // AMD vendor still read, 2 GPUs
}

TEST(TopologyXml, MissingFileWarns) {
  const System s = system_from_nccl_xml_file("/nonexistent/topo.xml");
  EXPECT_TRUE(s.gpus.empty());
  EXPECT_TRUE(any_warning_contains(s, "cannot read the topology file"));
}

}  // namespace
}  // namespace peerlink::topology
