// Discovery from a sysfs tree: GPU list (runtime or PCI class scan), each GPU's PCI path up to its
// root complex, NUMA node and CPU socket, then NVLink from NVML (or the runtime's hint).
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/format.h"
#include "common/log.h"
#include "gpu/runtime.h"
#include "topology/cpu.h"
#include "topology/probe.h"

namespace peerlink::topology {

bool read_small_file(const std::string& path, std::string* out, size_t max_bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::string s;
  char buf[4096];
  while (f.read(buf, sizeof buf) || f.gcount() > 0) {
    s.append(buf, static_cast<size_t>(f.gcount()));
    if (s.size() > max_bytes) return false;
  }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  *out = s;
  return true;
}

namespace {

bool is_bdf(const std::string& s) { return normalize_bus_id(s) == s && s.size() == 12; }

std::string join(const std::string& a, const std::string& b) {
  if (a.empty() || a.back() == '/') return a + b;
  return a + "/" + b;
}

bool parse_int_text(const std::string& s, int base, long* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, base);
  if (!end || *end != '\0') return false;
  *out = v;
  return true;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// PCI display (0x0300), 3D (0x0302) or other display (0x0380, AMD Instinct) controllers of NVIDIA
// or AMD; 3D controllers of any vendor. Keeps BMC / emulated VGA devices out of the list.
bool is_gpu_device(const std::string& devdir) {
  std::string cls, vendor;
  long c = 0, v = 0;
  if (!read_small_file(join(devdir, "class"), &cls) || !parse_int_text(cls, 16, &c)) return false;
  const long sub = c >> 8;
  if (sub == 0x0302) return true;
  if (sub != 0x0300 && sub != 0x0380) return false;
  if (!read_small_file(join(devdir, "vendor"), &vendor) || !parse_int_text(vendor, 16, &v)) return false;
  return v == 0x10de || v == 0x1002;
}

struct SocketMap {
  std::map<int, int> numa_to_package;
  std::set<int> packages;
};

SocketMap read_sockets(const std::string& root) {
  SocketMap m;
  const std::string cpu_dir = join(root, "sys/devices/system/cpu");
  auto package_of_cpu = [&](long cpu) -> int {
    std::string s;
    long p = -1;
    if (read_small_file(common::format("{}/cpu{}/topology/physical_package_id", cpu_dir, cpu), &s) &&
        parse_int_text(s, 10, &p) && p >= 0)
      return static_cast<int>(p);
    return -1;
  };
  for (const std::string& n : list_dir(cpu_dir)) {
    long cpu = -1;
    if (n.rfind("cpu", 0) != 0 || !parse_int_text(n.substr(3), 10, &cpu)) continue;
    int p = package_of_cpu(cpu);
    if (p >= 0) m.packages.insert(p);
  }
  const std::string node_dir = join(root, "sys/devices/system/node");
  for (const std::string& n : list_dir(node_dir)) {
    long node = -1;
    if (n.rfind("node", 0) != 0 || !parse_int_text(n.substr(4), 10, &node)) continue;
    std::string list;
    long first = -1;
    if (!read_small_file(common::format("{}/{}/cpulist", node_dir, n), &list)) continue;
    std::string head = list.substr(0, list.find_first_of(",-"));
    if (!parse_int_text(head, 10, &first)) continue;
    int p = package_of_cpu(first);
    if (p >= 0) m.numa_to_package[static_cast<int>(node)] = p;
  }
  return m;
}

// Fills host_bridge, pci_nodes and numa of g from root/sys/bus/pci/devices/<bus id>.
void locate_gpu(const std::string& root_real, Gpu* g, std::vector<std::string>* warnings) {
  const std::string link = join(root_real, "sys/bus/pci/devices/" + g->bus_id);
  char resolved[PATH_MAX];
  if (g->bus_id.empty() || !realpath(link.c_str(), resolved)) {
    warnings->push_back(common::format("GPU{} ({}): {} not found; its PCI path is unknown", g->index, g->bus_id, link));
    return;
  }
  const std::string devices = join(root_real, "sys/devices/");
  std::string path = resolved;
  if (path.rfind(devices, 0) != 0) {
    warnings->push_back(common::format("GPU{}: {} does not lead under {}", g->index, link, devices));
    return;
  }
  std::vector<std::string> comps;
  std::istringstream in(path.substr(devices.size()));
  for (std::string c; std::getline(in, c, '/');)
    if (!c.empty()) comps.push_back(c);
  if (comps.empty() || comps.back() != g->bus_id) {
    warnings->push_back(common::format("GPU{}: sysfs path {} does not end in its bus id", g->index, path));
    return;
  }
  // The host bridge is the first component above the GPU that is not a bus id (pci0000:40, or a
  // VMD domain's pci10000:e0); everything between is a PCIe bridge.
  int p = static_cast<int>(comps.size()) - 1;
  int hb = p - 1;
  while (hb >= 0 && is_bdf(comps[hb])) --hb;
  if (hb < 0) {
    warnings->push_back(common::format("GPU{}: no host bridge above it in {}", g->index, path));
    return;
  }
  g->host_bridge = comps[hb];
  // NCCL's walk: up two levels at a time (downstream port, then upstream port), so a PCIe switch
  // is one node named by its upstream port and a lone root port is not a node at all.
  while (p - 2 > hb) {
    p -= 2;
    g->pci_nodes.push_back(comps[p]);
  }
  g->path_known = true;
  std::string numa;
  long n = -1;
  if (read_small_file(join(resolved, "numa_node"), &numa)) {
    if (parse_int_text(numa, 10, &n) && n >= -1 && n < 4096)
      g->numa = static_cast<int>(n);
    else
      warnings->push_back(common::format("GPU{}: numa_node '{}' is not a number; NUMA unknown", g->index, numa));
  }
}

std::vector<std::string> scan_gpus(const std::string& root_real) {
  std::vector<std::string> ids;
  const std::string dir = join(root_real, "sys/bus/pci/devices");
  for (const std::string& n : list_dir(dir)) {
    const std::string id = normalize_bus_id(n);
    if (!id.empty() && is_gpu_device(join(dir, n))) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

// The GPUs to describe, in order: the caller's bus ids, else the runtime's devices (live), else
// every GPU of the sysfs tree. *runtime_gpus: how many the runtime reported (0 when not asked).
std::vector<std::string> gpu_bus_ids(const ProbeOptions& opts, bool live, const std::string& root_real, System* sys,
                                     int* runtime_gpus) {
  std::vector<std::string> bus_ids;
  *runtime_gpus = 0;
  if (!opts.bus_ids.empty()) {
    for (const std::string& id : opts.bus_ids) {
      bus_ids.push_back(normalize_bus_id(id));
      if (bus_ids.back().empty()) sys->warnings.push_back(common::format("'{}' is not a PCI bus id", id));
    }
    return bus_ids;
  }
  if (live) {
    *runtime_gpus = gpu::device_count();
    for (int i = 0; i < *runtime_gpus; ++i) {
      std::string id;
      try {
        id = normalize_bus_id(gpu::pci_bus_id(i));
      } catch (const std::exception& e) {
        sys->warnings.push_back(common::format("GPU{}: runtime could not tell its PCI bus id: {}", i, e.what()));
      }
      bus_ids.push_back(id);
    }
  }
  if (*runtime_gpus == 0 && !root_real.empty()) bus_ids = scan_gpus(root_real);
  if (live && *runtime_gpus == 0 && !bus_ids.empty())
    sys->warnings.push_back(
        common::format("the GPU runtime ({}) sees no device; listing the {} GPUs found in sysfs instead",
                       gpu::runtime_name(), bus_ids.size()));
  return bus_ids;
}

// Each GPU's PCI path, NUMA node and socket, and the PCIe link of every pair.
void place_gpus(System* sys, const std::vector<std::string>& bus_ids, const std::string& root_real) {
  const SocketMap sockets = root_real.empty() ? SocketMap{} : read_sockets(root_real);
  for (size_t i = 0; i < bus_ids.size(); ++i) {
    Gpu g;
    g.index = static_cast<int>(i);
    g.bus_id = bus_ids[i];
    if (!root_real.empty()) locate_gpu(root_real, &g, &sys->warnings);
    auto it = sockets.numa_to_package.find(g.numa);
    if (it != sockets.numa_to_package.end())
      g.socket = it->second;
    else if (g.numa >= 0)
      g.socket = g.numa;  // no CPU map: NUMA node stands for the socket, as in NCCL
    else if (sockets.packages.size() == 1)
      g.socket = *sockets.packages.begin();
    sys->gpus.push_back(g);
  }
  const size_t n = sys->gpus.size();
  sys->links.assign(n, std::vector<Link>(n));
  for (size_t a = 0; a < n; ++a)
    for (size_t b = 0; b < n; ++b)
      if (a != b) sys->links[a][b] = pcie_link(sys->gpus[a], sys->gpus[b]);
}

// NVLinks over the PCIe links: the caller's table, else NVML on this machine, else the runtime's
// P2P hint.
void add_nvlinks(System* sys, const ProbeOptions& opts, const std::vector<std::string>& bus_ids, bool root_is_machine) {
  const size_t n = sys->gpus.size();
  NvLinkTable table;
  std::string why;
  if (opts.nvlinks) {
    if (opts.nvlinks(bus_ids, &table, &why)) apply_nvlinks(sys, table, "NVLink");
  } else if (root_is_machine) {
    if (nvml_nvlinks(bus_ids, &table, &why)) {
      apply_nvlinks(sys, table, "NVLink (NVML)");
    } else if (sys->live) {
      // No NVML: native peer atomics exist over NVLink/xGMI, not PCIe, so the runtime's hint
      // stands in for it.
      for (size_t a = 0; a < n; ++a)
        for (size_t b = a + 1; b < n; ++b)
          if (gpu::p2p_link_hint(static_cast<int>(a), static_cast<int>(b)) == 1) {
            Link l{PathType::NVL, true, common::format("NVLink/xGMI per the runtime's P2P hint ({})", why)};
            sys->links[a][b] = sys->links[b][a] = l;
          }
    }
  }
}

}  // namespace

System probe_sysfs(const ProbeOptions& opts) {
  System sys;
  const std::string root = opts.root.empty() ? "/" : opts.root;
  const bool root_is_machine = root == "/";
  const bool live = opts.live == ProbeOptions::Live::Yes || (opts.live == ProbeOptions::Live::Auto && root_is_machine);
  char resolved[PATH_MAX];
  std::string root_real = realpath(root.c_str(), resolved) ? resolved : "";
  if (root_real.empty()) sys.warnings.push_back(common::format("sysfs root '{}' does not exist", root));
  sys.source = common::format("sysfs:{}", root);

  int runtime_gpus = 0;
  const std::vector<std::string> bus_ids = gpu_bus_ids(opts, live, root_real, &sys, &runtime_gpus);
  sys.live = live && runtime_gpus > 0;

  sys.cpu = live ? cpu_of_this_machine() : CpuInfo{};
  if (!live) {
    std::string text;
    if (!root_real.empty() && read_small_file(join(root_real, "proc/cpuinfo"), &text))
      sys.cpu = cpu_from_proc_cpuinfo(text);
    else
      classify_generation(&sys.cpu);
  }

  place_gpus(&sys, bus_ids, root_real);
  if (sys.gpus.size() >= 2) add_nvlinks(&sys, opts, bus_ids, root_is_machine);
  return sys;
}

}  // namespace peerlink::topology
