// NCCL topology XML (NCCL_TOPO_DUMP_FILE) -> System. <cpu> elements are NUMA nodes; nested <pci>
// elements are NCCL's PCI nodes (a switch is already one node); a <pci> holding a <gpu> is a GPU;
// <nvlink>/<xgmi> children of a <gpu> are its links.
#include <algorithm>
#include <cstdlib>

#include "common/format.h"
#include "common/log.h"
#include "topology/cpu.h"
#include "topology/probe.h"
#include "topology/xml_reader.h"

namespace peerlink::topology {

namespace {

bool to_int(const std::string* s, int base, int* out) {
  if (!s || s->empty()) return false;
  char* end = nullptr;
  const long v = std::strtol(s->c_str(), &end, base);
  if (!end || *end != '\0' || v < -1 || v > 1000000) return false;
  *out = static_cast<int>(v);
  return true;
}

struct XmlGpu {
  Gpu gpu;
  int dev = -1;
  std::vector<NvLinkPeer> links;
};

class Reader {
 public:
  Reader(System* sys, const std::string& name) : sys_(sys), name_(name) {}

  void read_system(const XmlNode& root) {
    if (root.name != "system") {
      warn(common::format("document element is <{}>, not <system>; no GPUs read", root.name));
      return;
    }
    const std::string* version = root.attr("version");
    if (version && *version != "1")
      warn(common::format("system version '{}' (expected 1); reading it anyway", *version));
    int ci = 0;
    for (const XmlNode& cpu : root.children) {
      if (cpu.name != "cpu") continue;
      int numa = ci;
      if (!to_int(cpu.attr("numaid"), 10, &numa) || numa < 0) {
        warn(common::format("line {}: <cpu> without a valid numaid; using {}", cpu.line, ci));
        numa = ci;
      }
      if (ci == 0) read_cpu(cpu);
      std::vector<std::string> chain;
      walk(cpu, numa, &chain);
      ++ci;
    }
  }

  void finish() {
    // Runtime order is NCCL's dev attribute; GPUs without one follow in bus id order.
    std::stable_sort(gpus_.begin(), gpus_.end(), [](const XmlGpu& x, const XmlGpu& y) {
      const int dx = x.dev < 0 ? 1 << 30 : x.dev, dy = y.dev < 0 ? 1 << 30 : y.dev;
      return dx != dy ? dx < dy : x.gpu.bus_id < y.gpu.bus_id;
    });
    NvLinkTable table;
    for (size_t i = 0; i < gpus_.size(); ++i) {
      if (i > 0 && gpus_[i].dev >= 0 && gpus_[i].dev == gpus_[i - 1].dev)
        warn(common::format("two GPUs with dev={}; ordered by bus id", gpus_[i].dev));
      gpus_[i].gpu.index = static_cast<int>(i);
      sys_->gpus.push_back(gpus_[i].gpu);
      table.push_back(gpus_[i].links);
    }
    const size_t n = sys_->gpus.size();
    sys_->links.assign(n, std::vector<Link>(n));
    for (size_t a = 0; a < n; ++a)
      for (size_t b = 0; b < n; ++b)
        if (a != b) sys_->links[a][b] = pcie_link(sys_->gpus[a], sys_->gpus[b]);
    apply_nvlinks(sys_, table, "NVLink/xGMI per the XML");
  }

 private:
  void warn(const std::string& msg) { sys_->warnings.push_back(common::format("{}: {}", name_, msg)); }

  void read_cpu(const XmlNode& cpu) {
    CpuInfo& c = sys_->cpu;
    if (const std::string* v = cpu.attr("arch")) c.arch = *v;
    if (const std::string* v = cpu.attr("vendor")) c.vendor = *v;
    int fam = -1, model = -1;
    if (to_int(cpu.attr("familyid"), 10, &fam))
      c.family = family_from_nccl_familyid(fam);
    else if (cpu.attr("familyid"))
      warn(common::format("line {}: familyid '{}' is not a number", cpu.line, *cpu.attr("familyid")));
    if (to_int(cpu.attr("modelid"), 10, &model))
      c.model = model;
    else if (cpu.attr("modelid"))
      warn(common::format("line {}: modelid '{}' is not a number", cpu.line, *cpu.attr("modelid")));
    classify_generation(&c);
  }

  // chain: the busids of the enclosing <pci> nodes, outermost first.
  void walk(const XmlNode& node, int numa, std::vector<std::string>* chain) {
    for (const XmlNode& child : node.children) {
      if (child.name != "pci") continue;
      const std::string* gpu_el_busid = child.attr("busid");
      const XmlNode* gpu_el = nullptr;
      for (const XmlNode& g : child.children)
        if (g.name == "gpu") gpu_el = &g;
      if (gpu_el) {
        add_gpu(child, *gpu_el, numa, *chain);
        continue;
      }
      const std::string id = gpu_el_busid ? normalize_bus_id(*gpu_el_busid) : "";
      chain->push_back(id.empty() ? common::format("pci@line{}", child.line) : id);
      walk(child, numa, chain);
      chain->pop_back();
    }
  }

  void add_gpu(const XmlNode& pci, const XmlNode& g, int numa, const std::vector<std::string>& chain) {
    XmlGpu x;
    const std::string* busid = pci.attr("busid");
    x.gpu.bus_id = busid ? normalize_bus_id(*busid) : "";
    if (x.gpu.bus_id.empty()) {
      warn(common::format("line {}: GPU without a valid busid ('{}'); ignored", pci.line, busid ? *busid : ""));
      return;
    }
    if (g.attr("dev") && !to_int(g.attr("dev"), 10, &x.dev))
      warn(common::format("line {}: dev '{}' is not a number", g.line, *g.attr("dev")));
    x.gpu.numa = numa;
    x.gpu.socket = numa;  // NCCL's <cpu> is a NUMA node; the XML says nothing about sockets
    x.gpu.host_bridge = common::format("CPU {}", numa);
    x.gpu.pci_nodes.assign(chain.rbegin(), chain.rend());
    x.gpu.path_known = true;
    for (const XmlNode& l : g.children) {
      if (l.name != "nvlink" && l.name != "xgmi") continue;
      const std::string* target = l.attr("target");
      const std::string* tclass = l.attr("tclass");
      int count = 1;
      if (l.attr("count") && !to_int(l.attr("count"), 10, &count)) {
        warn(common::format("line {}: {} count '{}' is not a number; link ignored", l.line, l.name, *l.attr("count")));
        continue;
      }
      if (!target) {
        warn(common::format("line {}: {} without target; ignored", l.line, l.name));
        continue;
      }
      NvLinkPeer p;
      p.count = count;
      p.remote = normalize_bus_id(*target);
      const std::string cls = tclass ? *tclass : "";
      if (cls.rfind("0x0680", 0) == 0 || *target == "fffffff:ffff:ff") {
        p.kind = NvLinkPeer::Kind::Switch;  // NVSwitch (NCCL writes 0x068000)
        if (p.remote.empty()) p.remote = *target;
      } else if (cls.rfind("0x0302", 0) == 0 || cls.rfind("0x0300", 0) == 0 || cls.rfind("0x0380", 0) == 0 ||
                 (cls.empty() && !p.remote.empty())) {
        p.kind = NvLinkPeer::Kind::Gpu;
      } else {
        p.kind = NvLinkPeer::Kind::Other;  // a CPU (NVLink-C2C, POWER NPU): not a GPU pair
      }
      x.links.push_back(p);
    }
    gpus_.push_back(std::move(x));
  }

  System* sys_;
  std::string name_;
  std::vector<XmlGpu> gpus_;
};

}  // namespace

System system_from_nccl_xml_text(const std::string& text, const std::string& name) {
  System sys;
  sys.source = common::format("xml:{}", name);
  classify_generation(&sys.cpu);
  XmlParse parsed = parse_xml(text);
  if (!parsed.ok) {
    sys.warnings.push_back(
        common::format("{}: malformed XML ({}); no GPUs read, every pair relays", name, parsed.error));
    return sys;
  }
  Reader r(&sys, name);
  r.read_system(parsed.root);
  r.finish();
  return sys;
}

System system_from_nccl_xml_file(const std::string& path) {
  std::string text;
  if (!read_small_file(path, &text, kXmlMaxBytes)) {
    System sys;
    sys.source = common::format("xml:{}", path);
    classify_generation(&sys.cpu);
    sys.warnings.push_back(common::format(
        "{}: cannot read the topology file (missing, unreadable or over {} MiB); no GPUs read, every pair relays", path,
        kXmlMaxBytes >> 20));
    return sys;
  }
  return system_from_nccl_xml_text(text, path);
}

}  // namespace peerlink::topology
