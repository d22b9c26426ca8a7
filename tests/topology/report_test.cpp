// Renderings: the JSON schema (parsed back and checked key by key), the text matrix, zero GPUs,
// and explain() from the public header.
#include "topology/report.h"

#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <memory>

#include "peerlink/topology.h"
#include "topology_test_util.h"

namespace peerlink::topology {
namespace {

using namespace testing;

// A minimal JSON reader, enough to check the schema strictly (objects keep key order).
struct Json {
  enum Kind { Null, Bool, Num, Str, Arr, Obj } kind = Null;
  double num = 0;
  std::string str;
  std::vector<Json> arr;
  std::vector<std::pair<std::string, Json>> obj;
  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    for (const auto& kv : obj) k.push_back(kv.first);
    return k;
  }
  const Json& at(const std::string& key) const {
    for (const auto& kv : obj)
      if (kv.first == key) return kv.second;
    static const Json none;
    return none;
  }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& s) : s_(s) {}
  bool parse(Json* out) {
    if (!value(out)) return false;
    ws();
    return i_ == s_.size();
  }

 private:
  void ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool lit(const char* l) {
    const std::string x = l;
    if (s_.compare(i_, x.size(), x) != 0) return false;
    i_ += x.size();
    return true;
  }
  bool string(std::string* out) {
    if (i_ >= s_.size() || s_[i_] != '"') return false;
    for (++i_; i_ < s_.size(); ++i_) {
      if (s_[i_] == '"') {
        ++i_;
        return true;
      }
      if (static_cast<unsigned char>(s_[i_]) < 0x20) return false;
      if (s_[i_] == '\\') {
        if (++i_ >= s_.size()) return false;
        if (s_[i_] == 'u') {
          i_ += 4;
          *out += '?';
          continue;
        }
        *out += s_[i_] == 'n' ? '\n' : s_[i_] == 't' ? '\t' : s_[i_];
        continue;
      }
      *out += s_[i_];
    }
    return false;
  }
  bool value(Json* v) {
    ws();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '{') {
      v->kind = Json::Obj;
      ++i_;
      ws();
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        return true;
      }
      while (true) {
        ws();
        std::string k;
        if (!string(&k)) return false;
        ws();
        if (i_ >= s_.size() || s_[i_++] != ':') return false;
        Json child;
        if (!value(&child)) return false;
        v->obj.emplace_back(k, std::move(child));
        ws();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (i_ < s_.size() && s_[i_] == '}') {
          ++i_;
          return true;
        }
        return false;
      }
    }
    if (c == '[') {
      v->kind = Json::Arr;
      ++i_;
      ws();
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        return true;
      }
      while (true) {
        Json child;
        if (!value(&child)) return false;
        v->arr.push_back(std::move(child));
        ws();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (i_ < s_.size() && s_[i_] == ']') {
          ++i_;
          return true;
        }
        return false;
      }
    }
    if (c == '"') {
      v->kind = Json::Str;
      return string(&v->str);
    }
    if (lit("null")) {
      v->kind = Json::Null;
      return true;
    }
    if (lit("true") || lit("false")) {
      v->kind = Json::Bool;
      return true;
    }
    char* end = nullptr;
    v->num = std::strtod(s_.c_str() + i_, &end);
    if (end == s_.c_str() + i_) return false;
    v->kind = Json::Num;
    i_ = static_cast<size_t>(end - s_.c_str());
    return true;
  }
  const std::string& s_;
  size_t i_ = 0;
};

TEST(TopologyReport, JsonFollowsTheSchemaExactly) {
  const System s = probe_fixture("intel_2switch");
  Options o;
  const Level l = p2p_level(o, s);
  const std::string text = render_json(s, l, decide_all(o, s, nullptr));
  Json j;
  ASSERT_TRUE(JsonParser(text).parse(&j)) << text;
  EXPECT_EQ(j.keys(), (std::vector<std::string>{"cpu", "p2p_level", "gpus", "pairs"}));
  EXPECT_EQ(j.at("cpu").keys(),
            (std::vector<std::string>{"vendor", "family", "model", "generation", "inter_socket_gbps"}));
  EXPECT_EQ(j.at("cpu").at("vendor").str, "GenuineIntel");
  EXPECT_EQ(j.at("cpu").at("family").num, 6);
  EXPECT_EQ(j.at("cpu").at("model").num, 0x8F);
  EXPECT_EQ(j.at("cpu").at("generation").str, "SRP");
  EXPECT_EQ(j.at("cpu").at("inter_socket_gbps").num, 22);
  EXPECT_EQ(j.at("p2p_level").str, "PXB");
  ASSERT_EQ(j.at("gpus").arr.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const Json& g = j.at("gpus").arr[i];
    EXPECT_EQ(g.keys(), (std::vector<std::string>{"index", "bus_id", "numa"}));
    EXPECT_EQ(g.at("index").num, static_cast<double>(i));
    EXPECT_EQ(g.at("bus_id").str, s.gpus[i].bus_id);
    EXPECT_EQ(g.at("numa").num, 0);
  }
  ASSERT_EQ(j.at("pairs").arr.size(), 10u);
  for (const Json& p : j.at("pairs").arr) {
    EXPECT_EQ(p.keys(), (std::vector<std::string>{"a", "b", "path", "transport", "reason"}));
    const std::string path = p.at("path").str, tr = p.at("transport").str;
    EXPECT_TRUE(path == "NVL" || path == "PIX" || path == "PXB" || path == "PHB" || path == "SYS") << path;
    EXPECT_TRUE(tr == "direct" || tr == "relay") << tr;
    EXPECT_FALSE(p.at("reason").str.empty());
    EXPECT_LT(p.at("a").num, p.at("b").num);
  }
  EXPECT_EQ(j.at("pairs").arr[3].at("path").str, "PHB");  // GPU0-GPU4
  EXPECT_EQ(j.at("pairs").arr[3].at("transport").str, "relay");
}

TEST(TopologyReport, JsonWithZeroGpusAndUnknownCpu) {
  System s = system_from_nccl_xml_text("not xml", "bad.xml");
  Options o;
  Json j;
  const std::string text = render_json(s, p2p_level(o, s), decide_all(o, s, nullptr));
  ASSERT_TRUE(JsonParser(text).parse(&j)) << text;
  EXPECT_EQ(j.at("cpu").at("family").kind, Json::Null);
  EXPECT_TRUE(j.at("gpus").arr.empty());
  EXPECT_TRUE(j.at("pairs").arr.empty());
}

TEST(TopologyReport, TextMatrixReasonsAndWarnings) {
  const System s = probe_fixture("turin_2gpu");
  Options o;
  const std::string t = render_text(s, p2p_level(o, s), decide_all(o, s, nullptr));
  for (const char* want : {"GPU0    X       SYS d", "Zen5", "32 GB/s", "P2P level: SYS (default on AMD x86 with 2 GPUs",
                           "GPU0 <-> GPU1  SYS  direct", "across CPU sockets 0 and 1", "0000:81:00.0"})
    EXPECT_NE(t.find(want), std::string::npos) << want << "\n" << t;
  const System none = system_from_nccl_xml_file("/nonexistent.xml");
  const std::string n = render_text(none, p2p_level(o, none), {});
  EXPECT_NE(n.find("no GPUs"), std::string::npos) << n;
  EXPECT_NE(n.find("warning: /nonexistent.xml"), std::string::npos) << n;
}

TEST(TopologyReport, ExplainFromOptions) {
  Options o;
  o.log_level = LogLevel::None;
  o.topo_file = xml_fixture("dgx_h100");
  const std::string t = explain(o);
  EXPECT_NE(t.find("8 GPUs"), std::string::npos) << t;
  EXPECT_EQ(t.find("GPU7 <-> GPU0"), std::string::npos) << "pairs are listed a < b only";
  EXPECT_NE(t.find("GPU0 <-> GPU7  NVL  direct  NVLink pairs are always direct"), std::string::npos) << t;
  o.p2p_disable = true;
  EXPECT_NE(explain(o).find("GPU0 <-> GPU7  NVL  relay   PEERLINK_P2P_DISABLE=1"), std::string::npos);
}

}  // namespace
}  // namespace peerlink::topology
