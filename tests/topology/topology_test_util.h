// Helpers shared by the topology tests: fixture paths, compact path matrices, fake NVLink sources
// and throw-away sysfs trees for malformed-input cases.
#pragma once
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "topology/policy.h"
#include "topology/probe.h"
#include "topology/system.h"

namespace peerlink::topology::testing {

// tests/topology/fixtures, found next to this header (tests run from the repository root) or
// through PEERLINK_TOPO_FIXTURES.
inline std::string fixtures() {
  if (const char* e = std::getenv("PEERLINK_TOPO_FIXTURES")) return e;
  std::string here = __FILE__;
  return here.substr(0, here.rfind('/')) + "/fixtures";
}
inline std::string fixture(const std::string& name) { return fixtures() + "/" + name; }
inline std::string xml_fixture(const std::string& name) { return fixtures() + "/xml/" + name + ".xml"; }

inline System probe_fixture(const std::string& name, NvLinkSource links = nullptr) {
  ProbeOptions po;
  po.root = fixture(name);
  po.nvlinks = std::move(links);
  return probe_sysfs(po);
}

// One row per GPU: "X PHB SYS ..." (a '?' marks an unknown path).
inline std::vector<std::string> path_matrix(const System& s) {
  std::vector<std::string> rows;
  for (size_t a = 0; a < s.gpus.size(); ++a) {
    std::string r;
    for (size_t b = 0; b < s.gpus.size(); ++b) {
      if (b) r += " ";
      r += a == b ? "X" : std::string(path_name(s.links[a][b].path)) + (s.links[a][b].known ? "" : "?");
    }
    rows.push_back(r);
  }
  return rows;
}

// One row per GPU: "X d r ..." (d = direct, r = relay).
inline std::vector<std::string> transport_matrix(const Options& o, const System& s, const LiveChecks* live = nullptr) {
  const Level level = p2p_level(o, s);
  std::vector<std::string> rows;
  for (size_t a = 0; a < s.gpus.size(); ++a) {
    std::string r;
    for (size_t b = 0; b < s.gpus.size(); ++b) {
      if (b) r += " ";
      r += a == b ? "X" : decide(o, s, level, static_cast<int>(a), static_cast<int>(b), live).direct ? "d" : "r";
    }
    rows.push_back(r);
  }
  return rows;
}

// NVLink source answering from a fixed table keyed by bus id.
inline NvLinkSource fake_nvlinks(std::map<std::string, std::vector<NvLinkPeer>> by_bus) {
  return [by_bus](const std::vector<std::string>& ids, NvLinkTable* out, std::string*) {
    out->clear();
    for (const std::string& id : ids) {
      auto it = by_bus.find(id);
      out->push_back(it == by_bus.end() ? std::vector<NvLinkPeer>{} : it->second);
    }
    return true;
  };
}

inline bool any_warning_contains(const System& s, const std::string& needle) {
  for (const std::string& w : s.warnings)
    if (w.find(needle) != std::string::npos) return true;
  return false;
}

// A scratch directory under /tmp, removed (with everything in it) at scope exit.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/peerlink_topo_test_XXXXXX";
    const char* d = mkdtemp(tmpl);
    path_ = d ? d : "";
  }
  ~TempDir() {
    if (!path_.empty()) (void)!std::system(("rm -rf '" + path_ + "'").c_str());
  }
  const std::string& path() const { return path_; }
  void write(const std::string& rel, const std::string& text) const {
    if (rel.find('/') != std::string::npos) mkdirs(rel.substr(0, rel.rfind('/')));
    std::ofstream(path_ + "/" + rel) << text;
  }
  void symlink(const std::string& rel, const std::string& target) const {
    if (rel.find('/') != std::string::npos) mkdirs(rel.substr(0, rel.rfind('/')));
    ASSERT_EQ(::symlink(target.c_str(), (path_ + "/" + rel).c_str()), 0) << rel;
  }
  void mkdirs(const std::string& rel) const {
    std::string p = path_;
    size_t start = 0;
    while (start <= rel.size()) {
      size_t slash = rel.find('/', start);
      if (slash == std::string::npos) slash = rel.size();
      p += "/" + rel.substr(start, slash - start);
      ::mkdir(p.c_str(), 0755);
      start = slash + 1;
    }
  }

 private:
  std::string path_;
};

}  // namespace peerlink::topology::testing
