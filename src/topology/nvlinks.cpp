// NVLink discovery through NVML (loaded with dlopen, optional) and the rule that turns NVLink
// endpoints into NVL pairs: a direct GPU-GPU link, or a common NVSwitch.
#include <dlfcn.h>

#include <map>
#include <set>

#include "common/format.h"
#include "common/log.h"
#include "topology/probe.h"

namespace peerlink::topology {

namespace {

// The few NVML declarations we need (nvml.h is not a build dependency).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr unsigned kNvmlMaxLinks = 18;                       // NVML_NVLINK_MAX_LINKS
constexpr int kNvmlEnabled = 1;                              // NVML_FEATURE_ENABLED
constexpr unsigned kNvLinkDevGpu = 0, kNvLinkDevSwitch = 2;  // nvmlIntNvLinkDeviceType_t
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

struct Nvml {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*by_bus_id)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned, int*) = nullptr;
  nvmlReturn_t (*remote_pci)(nvmlDevice_t, unsigned, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*remote_type)(nvmlDevice_t, unsigned, unsigned*) = nullptr;  // optional
  bool initialized = false;

  ~Nvml() {
    if (initialized && shutdown) shutdown();
    if (lib) dlclose(lib);
  }
  template <typename F>
  bool sym(F* f, const char* name) {
    *f = reinterpret_cast<F>(dlsym(lib, name));
    return *f != nullptr;
  }
};

}  // namespace

bool nvml_nvlinks(const std::vector<std::string>& bus_ids, NvLinkTable* out, std::string* why,
                  const std::string& library) {
  Nvml nv;
  nv.lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!nv.lib) {
    *why = library + " not loadable";
    return false;
  }
  if (!nv.sym(&nv.init, "nvmlInit_v2") || !nv.sym(&nv.shutdown, "nvmlShutdown") ||
      !nv.sym(&nv.by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2") ||
      !nv.sym(&nv.link_state, "nvmlDeviceGetNvLinkState") ||
      !nv.sym(&nv.remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2")) {
    *why = library + " lacks an NVLink function";
    return false;
  }
  nv.sym(&nv.remote_type, "nvmlDeviceGetNvLinkRemoteDeviceType");
  if (nv.init() != kNvmlSuccess) {
    *why = "nvmlInit_v2 failed";
    return false;
  }
  nv.initialized = true;
  out->assign(bus_ids.size(), {});
  for (size_t i = 0; i < bus_ids.size(); ++i) {
    nvmlDevice_t dev = nullptr;
    if (bus_ids[i].empty() || nv.by_bus_id(bus_ids[i].c_str(), &dev) != kNvmlSuccess) {
      *why = common::format("NVML does not know GPU {}", bus_ids[i]);
      return false;
    }
    std::map<std::pair<std::string, NvLinkPeer::Kind>, int> counts;
    for (unsigned l = 0; l < kNvmlMaxLinks; ++l) {
      int active = 0;
      nvmlPciInfo_t pci{};
      if (nv.link_state(dev, l, &active) != kNvmlSuccess || active != kNvmlEnabled) continue;
      if (nv.remote_pci(dev, l, &pci) != kNvmlSuccess) continue;
      pci.busId[sizeof pci.busId - 1] = '\0';
      std::string remote = normalize_bus_id(pci.busId);
      NvLinkPeer::Kind kind = NvLinkPeer::Kind::Other;
      unsigned type = 0;
      if (nv.remote_type && nv.remote_type(dev, l, &type) == kNvmlSuccess) {
        kind = type == kNvLinkDevGpu      ? NvLinkPeer::Kind::Gpu
               : type == kNvLinkDevSwitch ? NvLinkPeer::Kind::Switch
                                          : NvLinkPeer::Kind::Other;
      } else {
        // Without the type call: NVML hands out handles only for GPUs; anything else on the far end
        // of an NVLink of a GPU is taken to be an NVSwitch.
        nvmlDevice_t peer = nullptr;
        kind = (!remote.empty() && nv.by_bus_id(pci.busId, &peer) == kNvmlSuccess) ? NvLinkPeer::Kind::Gpu
                                                                                   : NvLinkPeer::Kind::Switch;
      }
      if (kind == NvLinkPeer::Kind::Switch && remote.empty()) remote = "nvswitch";
      ++counts[{remote, kind}];
    }
    for (const auto& [key, count] : counts) (*out)[i].push_back({key.first, key.second, count});
  }
  return true;
}

void apply_nvlinks(System* sys, const NvLinkTable& table, const std::string& source) {
  const size_t n = sys->gpus.size();
  std::map<std::string, int> index_of;
  for (size_t i = 0; i < n; ++i) index_of[sys->gpus[i].bus_id] = static_cast<int>(i);
  std::vector<std::map<std::string, int>> switch_links(n);  // remote switch -> link count
  for (size_t i = 0; i < n && i < table.size(); ++i) {
    for (const NvLinkPeer& p : table[i]) {
      if (p.count <= 0) continue;
      if (p.kind == NvLinkPeer::Kind::Switch) {
        switch_links[i][p.remote] += p.count;
      } else if (p.kind == NvLinkPeer::Kind::Gpu) {
        auto it = index_of.find(p.remote);
        if (it == index_of.end() || it->second == static_cast<int>(i)) continue;  // a GPU we do not use
        Link l{PathType::NVL, true, common::format("{}: {} direct link{}", source, p.count, p.count == 1 ? "" : "s")};
        sys->links[i][it->second] = sys->links[it->second][i] = l;
      }
    }
  }
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      if (sys->links[a][b].path == PathType::NVL) continue;
      int links_a = 0;
      for (const auto& [sw, count] : switch_links[a])
        if (switch_links[b].count(sw)) links_a += count;
      if (links_a == 0) continue;
      Link l{PathType::NVL, true, common::format("{}: through NVSwitch ({} links from GPU{})", source, links_a, a)};
      sys->links[a][b] = sys->links[b][a] = l;
    }
  }
}

}  // namespace peerlink::topology
