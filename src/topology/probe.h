// Building a System: from a sysfs tree (this machine's "/" or a fixture root) or from an NCCL
// topology XML. Neither throws for machine or file problems: they add a warning and leave the
// affected paths unknown, which the policy treats conservatively.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "topology/system.h"

namespace peerlink::topology {

// One NVLink (or xGMI) endpoint seen from a GPU, with the number of links to it.
struct NvLinkPeer {
  enum class Kind { Gpu, Switch, Other };
  std::string remote;  // normalized bus id of the remote end (or NCCL's switch placeholder)
  Kind kind = Kind::Other;
  int count = 0;
};
using NvLinkTable = std::vector<std::vector<NvLinkPeer>>;  // per GPU, in System::gpus order

// Answers NVLink endpoints for the given GPU bus ids; false (with *why) when it cannot answer.
using NvLinkSource = std::function<bool(const std::vector<std::string>& bus_ids, NvLinkTable* out, std::string* why)>;

// NVML through dlopen("libnvidia-ml.so.1"); false when the library or a GPU is not there. Tests
// pass another library path.
bool nvml_nvlinks(const std::vector<std::string>& bus_ids, NvLinkTable* out, std::string* why,
                  const std::string& library = "libnvidia-ml.so.1");

// Marks GPU pairs linked directly, or through a common NVSwitch, as NVL.
void apply_nvlinks(System* sys, const NvLinkTable& table, const std::string& source);

struct ProbeOptions {
  std::string root = "/";  // directory holding sys/ (and proc/cpuinfo for fixtures)
  // GPU list and CPU from the runtime / CPUID. Default: only when root is "/". Otherwise GPUs are
  // the PCI display/3D devices of NVIDIA or AMD under root (bus id order) and the CPU comes from
  // root/proc/cpuinfo.
  enum class Live { Auto, Yes, No } live = Live::Auto;
  // Explicit GPU list (bus ids, any spelling): used instead of the runtime or the class scan. The
  // System is then not "live" (its indices are not runtime devices).
  std::vector<std::string> bus_ids;
  // NVLink endpoints; unset: NVML (then the runtime's P2P hint) for "/", nothing for a fixture.
  NvLinkSource nvlinks;
};

System probe_sysfs(const ProbeOptions& opts);

// NCCL_TOPO_DUMP_FILE format. `name` is used in messages and System::source.
System system_from_nccl_xml_text(const std::string& text, const std::string& name);
System system_from_nccl_xml_file(const std::string& path);

// Reads a small text file; false if it cannot be read. Trailing whitespace is stripped.
bool read_small_file(const std::string& path, std::string* out, size_t max_bytes = 1 << 20);

}  // namespace peerlink::topology
