// Text (like `nvidia-smi topo -m`) and JSON renderings of a System and its decisions.
#include "topology/report.h"

#include <cstdio>
#include <sstream>

#include "common/format.h"
#include "common/log.h"
#include "gpu/runtime.h"

namespace peerlink::topology {

namespace {

std::string hex_or_unknown(int v) {
  if (v < 0) return "?";
  return common::format("0x{:02X}", v);
}

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      case '\r': o += "\\r"; break;
      default:
        if (c < 0x20) {
          o += common::format("\\u{:04x}", c);
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o + "\"";
}

std::string json_int_or_null(int v) { return v < 0 ? "null" : std::to_string(v); }

std::string json_number(double v) { return common::format("{:g}", v); }

}  // namespace

std::string render_text(const System& sys, const Level& level, const std::vector<Decision>& pairs) {
  std::ostringstream o;
  const size_t n = sys.gpus.size();
  const CpuInfo& c = sys.cpu;
  o << "peerlink topology from " << sys.source << ": " << n << " GPU" << (n == 1 ? "" : "s") << "\n";
  o << "CPU: " << (c.vendor.empty() ? "unknown vendor" : c.vendor) << " (" << (c.arch.empty() ? "?" : c.arch)
    << ") family " << hex_or_unknown(c.family) << " model " << hex_or_unknown(c.model) << ", generation "
    << c.generation << ", inter-socket bandwidth estimate " << c.inter_socket_gbps << " GB/s"
    << (c.generation == "unknown" ? " (unknown CPU: conservative)" : "") << "\n";
  o << "P2P level: " << path_name(level.level) << " (" << level.why << ")\n";
  if (n == 0) {
    o << "no GPUs found (GPU runtime: " << gpu::runtime_name() << "): nothing to decide.\n";
  } else {
    o << "\n" << pad("", 8);
    for (size_t b = 0; b < n; ++b) o << pad(common::format("GPU{}", b), 8);
    o << pad("NUMA", 6) << "Bus id\n";
    for (size_t a = 0; a < n; ++a) {
      o << pad(common::format("GPU{}", a), 8);
      for (size_t b = 0; b < n; ++b) {
        if (a == b) {
          o << pad("X", 8);
          continue;
        }
        std::string cell = "?";
        for (const Decision& d : pairs)
          if ((d.a == static_cast<int>(a) && d.b == static_cast<int>(b)) ||
              (d.a == static_cast<int>(b) && d.b == static_cast<int>(a)))
            cell = common::format("{}{}{}", path_name(d.path), d.path_known ? "" : "?", d.direct ? " d" : " r");
        o << pad(cell, 8);
      }
      o << pad(sys.gpus[a].numa < 0 ? "-" : std::to_string(sys.gpus[a].numa), 6) << sys.gpus[a].bus_id << "\n";
    }
    o << "\nCells: path, then d = direct P2P, r = relay through pinned host memory; '?' = path unknown.\n"
         "  NVL = NVLink/xGMI         PIX = at most one PCIe bridge or switch\n"
         "  PXB = several PCIe bridges, no host bridge\n"
         "  PHB = through a PCIe host bridge of one CPU socket   SYS = across CPU sockets\n"
         "Override: PEERLINK_P2P_LEVEL=LOC|NVL|PIX|PXB|PHB|SYS (or 0-4), PEERLINK_P2P_DISABLE=1.\n\n";
    for (const Decision& d : pairs)
      o << "GPU" << d.a << " <-> GPU" << d.b << "  " << path_name(d.path) << "  " << (d.direct ? "direct" : "relay ")
        << "  " << d.reason << "\n";
  }
  for (const std::string& w : sys.warnings) o << "warning: " << w << "\n";
  return o.str();
}

std::string render_json(const System& sys, const Level& level, const std::vector<Decision>& pairs) {
  std::ostringstream o;
  const CpuInfo& c = sys.cpu;
  o << "{\"cpu\": {\"vendor\": " << json_string(c.vendor) << ", \"family\": " << json_int_or_null(c.family)
    << ", \"model\": " << json_int_or_null(c.model) << ", \"generation\": " << json_string(c.generation)
    << ", \"inter_socket_gbps\": " << json_number(c.inter_socket_gbps) << "},\n";
  o << " \"p2p_level\": " << json_string(path_name(level.level)) << ",\n \"gpus\": [";
  for (size_t i = 0; i < sys.gpus.size(); ++i) {
    const Gpu& g = sys.gpus[i];
    o << (i ? ",\n  " : "\n  ") << "{\"index\": " << g.index << ", \"bus_id\": " << json_string(g.bus_id)
      << ", \"numa\": " << g.numa << "}";
  }
  o << (sys.gpus.empty() ? "],\n" : "\n ],\n") << " \"pairs\": [";
  for (size_t i = 0; i < pairs.size(); ++i) {
    const Decision& d = pairs[i];
    o << (i ? ",\n  " : "\n  ") << "{\"a\": " << d.a << ", \"b\": " << d.b
      << ", \"path\": " << json_string(path_name(d.path))
      << ", \"transport\": " << json_string(d.direct ? "direct" : "relay") << ", \"reason\": " << json_string(d.reason)
      << "}";
  }
  o << (pairs.empty() ? "]}\n" : "\n ]}\n");
  return o.str();
}

}  // namespace peerlink::topology
