// Path names, level parsing, bus id normalization and the PCIe path classification shared by the
// sysfs probe and the NCCL XML reader.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "common/format.h"
#include "common/log.h"
#include "topology/system.h"

namespace peerlink::topology {

const char* path_name(PathType p) {
  switch (p) {
    case PathType::LOC: return "LOC";
    case PathType::NVL: return "NVL";
    case PathType::PIX: return "PIX";
    case PathType::PXB: return "PXB";
    case PathType::PHB: return "PHB";
    case PathType::SYS: return "SYS";
  }
  return "SYS";
}

bool parse_level(const std::string& text, PathType* out) {
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c)))
      s += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const struct {
    const char* name;
    PathType p;
  } kNames[] = {{"LOC", PathType::LOC}, {"NVL", PathType::NVL}, {"NVB", PathType::NVL}, {"PIX", PathType::PIX},
                {"PXB", PathType::PXB}, {"PHB", PathType::PHB}, {"SYS", PathType::SYS}};
  for (const auto& n : kNames)
    if (s == n.name) {
      *out = n.p;
      return true;
    }
  // NCCL's legacy numeric levels.
  static const PathType kNumeric[] = {PathType::LOC, PathType::PIX, PathType::PXB, PathType::PHB, PathType::SYS};
  if (s.size() == 1 && s[0] >= '0' && s[0] <= '4') {
    *out = kNumeric[s[0] - '0'];
    return true;
  }
  return false;
}

bool CpuInfo::is_amd_x86() const { return vendor == "AuthenticAMD" && (arch.empty() || arch == "x86_64"); }

namespace {
// Reads 1..max_digits hex digits at s[*i]; strict (no "0x", no sign, unlike sscanf's %x).
bool hex_field(const std::string& s, size_t* i, size_t max_digits, unsigned* out) {
  size_t n = 0;
  unsigned v = 0;
  while (*i < s.size() && std::isxdigit(static_cast<unsigned char>(s[*i])) && n < max_digits) {
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(s[*i])));
    v = v * 16 + static_cast<unsigned>(c <= '9' ? c - '0' : c - 'a' + 10);
    ++*i;
    ++n;
  }
  *out = v;
  return n > 0;
}
}  // namespace

std::string normalize_bus_id(const std::string& text) {
  // "dddd:bb:dd.f" with a domain of up to 8 digits (NVML writes 8), or "bb:dd.f".
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  size_t i = 0;
  const bool has_domain = std::count(text.begin(), text.end(), ':') == 2;
  if (has_domain && (!hex_field(text, &i, 8, &dom) || i >= text.size() || text[i++] != ':')) return "";
  if (!hex_field(text, &i, 2, &bus) || i >= text.size() || text[i++] != ':') return "";
  if (!hex_field(text, &i, 2, &dev) || i >= text.size() || text[i++] != '.') return "";
  if (!hex_field(text, &i, 1, &fn) || i != text.size()) return "";
  if (dom > 0xffff || dev > 0x1f || fn > 7) return "";
  return common::format("{:04x}:{:02x}:{:02x}.{:x}", dom, bus, dev, fn);
}

Link pcie_link(const Gpu& a, const Gpu& b) {
  Link l;
  if (!a.path_known || !b.path_known || a.host_bridge.empty() || b.host_bridge.empty()) {
    const Gpu& bad = !a.path_known || a.host_bridge.empty() ? a : b;
    l.path = PathType::SYS;
    l.known = false;
    l.detail = common::format("PCI location of GPU{} ({}) unknown", bad.index, bad.bus_id);
    return l;
  }
  l.known = true;
  if (a.host_bridge == b.host_bridge) {
    // Lowest common PCI node (chains are listed closest first).
    for (const std::string& n : a.pci_nodes) {
      if (std::find(b.pci_nodes.begin(), b.pci_nodes.end(), n) == b.pci_nodes.end()) continue;
      if (n == a.pci_nodes.front() && n == b.pci_nodes.front()) {
        l.path = PathType::PIX;
        l.detail = common::format("both behind PCIe switch/bridge {}", n);
      } else {
        l.path = PathType::PXB;
        l.detail = common::format("through several PCIe switches meeting at {}, no host bridge", n);
      }
      return l;
    }
    l.path = PathType::PHB;
    if (a.pci_nodes.empty() && b.pci_nodes.empty())
      l.detail = common::format("through host bridge {}, no PCIe switch above either GPU", a.host_bridge);
    else
      l.detail = common::format("through host bridge {}", a.host_bridge);
    return l;
  }
  if (a.socket >= 0 && b.socket >= 0) {
    if (a.socket == b.socket) {
      l.path = PathType::PHB;
      l.detail =
          common::format("different root complexes {} and {} of CPU socket {}", a.host_bridge, b.host_bridge, a.socket);
    } else {
      l.path = PathType::SYS;
      l.detail = common::format("across CPU sockets {} and {}", a.socket, b.socket);
    }
    return l;
  }
  l.path = PathType::SYS;
  l.detail = common::format("different root complexes {} and {}, socket unknown: assumed across sockets", a.host_bridge,
                            b.host_bridge);
  return l;
}

}  // namespace peerlink::topology
