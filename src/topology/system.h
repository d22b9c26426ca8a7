// The topology model: GPUs, the path type between every pair, and the CPU. Filled either by probing
// a (real or fixture) sysfs tree or by reading an NCCL topology XML; the policy only reads it.
#pragma once
#include <string>
#include <vector>

namespace peerlink::topology {

// NCCL's path types, ordered from closest to farthest so that "path <= level" means "allowed".
// NVL is NVLink (or xGMI); PIX: at most one PCIe bridge/switch; PXB: several bridges, no host
// bridge; PHB: through a host bridge (root complex) of one CPU socket; SYS: across sockets.
enum class PathType { LOC = 0, NVL = 1, PIX = 2, PXB = 3, PHB = 4, SYS = 5 };

const char* path_name(PathType p);
// Parses a P2P level as NCCL does: LOC, NVL, NVB (= NVL here), PIX, PXB, PHB, SYS (any case), or
// the legacy numbers 0=LOC, 1=PIX, 2=PXB, 3=PHB, 4=SYS. False when the text is none of those.
bool parse_level(const std::string& text, PathType* out);

struct CpuInfo {
  std::string arch;                    // "x86_64", "aarch64", ... ("" unknown)
  std::string vendor;                  // CPUID vendor string: "GenuineIntel", "AuthenticAMD", ... ("" unknown)
  int family = -1;                     // decoded x86 family (e.g. 0x1A), -1 unknown
  int model = -1;                      // decoded x86 model (e.g. 0x8F), -1 unknown
  std::string generation = "unknown";  // BDW, SKL, SRP, ERP, Zen1/2, Zen3/4, Zen5, unknown
  double inter_socket_gbps = 0;        // estimate from the generation table
  bool is_amd_x86() const;
};

struct Gpu {
  int index = 0;            // runtime device index (or position in the fixture / XML order)
  std::string bus_id;       // normalized "dddd:bb:dd.f", lower case
  int numa = -1;            // NUMA node, -1 unknown
  int socket = -1;          // CPU package the GPU hangs off, -1 unknown
  std::string host_bridge;  // root complex, e.g. "pci0000:40" ("" unknown)
  // NCCL-style PCI nodes from the GPU up to its root complex (closest first). A PCIe switch
  // (upstream + downstream port) counts as one node, named by its upstream port, as NCCL does.
  std::vector<std::string> pci_nodes;
  bool path_known = false;  // false: the PCI location could not be read (treated conservatively)
};

struct Link {
  PathType path = PathType::SYS;
  bool known = false;  // false: path could not be determined (SYS is then only a placeholder)
  std::string detail;  // how the path was derived, for the reason text
};

struct System {
  std::string source;  // "sysfs:/", "sysfs:<fixture root>", "xml:<file>"
  bool live = false;   // probed from this machine's runtime: live P2P checks apply
  CpuInfo cpu;
  std::vector<Gpu> gpus;
  std::vector<std::vector<Link>> links;  // links[a][b], symmetric
  std::vector<std::string> warnings;     // problems met while probing; the answer is conservative
};

// Normalizes a PCI bus id ("00000000:1B:00.0", "0000:1b:00.0", "1b:00.0") to "dddd:bb:dd.f".
// Returns "" when the text is not a bus id.
std::string normalize_bus_id(const std::string& text);

// NCCL-style PCI path type between two GPUs from their PCI node chains, sockets and NUMA nodes
// (no NVLink involved). `detail` explains the result.
Link pcie_link(const Gpu& a, const Gpu& b);

}  // namespace peerlink::topology
