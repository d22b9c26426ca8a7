// Public entry points (peerlink/topology.h), the per-process caches and the live-check wiring.
// Caches hold machine facts only (probe results, copy-check outcomes), never configuration: the
// Options of each call decide.
#include "peerlink/topology.h"

#include <map>
#include <mutex>
#include <sys/stat.h>

#include "common/log.h"
#include "gpu/runtime.h"
#include "topology/probe.h"
#include "topology/report.h"

namespace peerlink::topology {

using common::cat;

namespace {

std::mutex g_mu;
std::map<std::string, System> g_systems;         // "machine" or "xml:<path>:<size>:<mtime>"
std::map<std::string, std::string> g_copy_checks;  // "<bus a>|<bus b>" -> "" or the failure

void log_warnings(const Options& opts, const System& sys) {
  for (const std::string& w : sys.warnings) common::log_line(LogLevel::Warn, opts.log_level, "topology: " + w);
}

}  // namespace

System load_system(const Options& opts) {
  std::string key = "machine";
  if (!opts.topo_file.empty()) {
    struct stat st{};
    key = stat(opts.topo_file.c_str(), &st) == 0
              ? cat("xml:", opts.topo_file, ":", st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec)
              : cat("xml:", opts.topo_file, ":missing");
  }
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_systems.find(key);
    if (it != g_systems.end()) return it->second;
  }
  System sys;
  try {
    sys = opts.topo_file.empty() ? probe_sysfs(ProbeOptions{}) : system_from_nccl_xml_file(opts.topo_file);
  } catch (const std::exception& e) {  // e.g. std::bad_alloc: still no exception out of here
    sys = System{};
    sys.source = opts.topo_file.empty() ? "sysfs:/" : "xml:" + opts.topo_file;
    sys.warnings.push_back(cat("topology probe failed: ", e.what(), "; no GPUs, every pair relays"));
  }
  log_warnings(opts, sys);
  std::lock_guard<std::mutex> lk(g_mu);
  return g_systems.emplace(key, std::move(sys)).first->second;
}

LiveChecks cached_live_checks(const System& sys) {
  const int count = gpu::device_count();
  if (count <= 0) return {};
  // System index -> runtime device index, by bus id: an XML or an explicit bus id list may order
  // GPUs differently, or name GPUs this process cannot see (those are not checked).
  std::vector<int> runtime_index(sys.gpus.size(), -1);
  for (int r = 0; r < count; ++r) {
    std::string bus;
    try {
      bus = normalize_bus_id(gpu::pci_bus_id(r));
    } catch (const std::exception&) {
      continue;
    }
    for (size_t i = 0; i < sys.gpus.size(); ++i)
      if (!bus.empty() && sys.gpus[i].bus_id == bus) runtime_index[i] = r;
  }
  auto rt = [runtime_index](int i) {
    return i >= 0 && i < static_cast<int>(runtime_index.size()) ? runtime_index[i] : -1;
  };
  std::vector<std::string> bus;
  for (const Gpu& g : sys.gpus) bus.push_back(g.bus_id);
  const LiveChecks runtime = runtime_live_checks();
  LiveChecks c;
  c.applies = [rt](int a, int b) { return rt(a) >= 0 && rt(b) >= 0; };
  c.can_access_peer = [rt, runtime](int a, int b) { return runtime.can_access_peer(rt(a), rt(b)); };
  c.copy_check = [rt, runtime, bus](int a, int b) -> std::string {
    const std::string key = a < b ? bus[a] + "|" + bus[b] : bus[b] + "|" + bus[a];
    {
      std::lock_guard<std::mutex> lk(g_mu);
      auto it = g_copy_checks.find(key);
      if (it != g_copy_checks.end()) return it->second;
    }
    std::string result = runtime.copy_check(rt(a), rt(b));
    std::lock_guard<std::mutex> lk(g_mu);
    return g_copy_checks.emplace(key, result).first->second;
  };
  return c;
}

namespace {
PairDecision to_public(const Decision& d) {
  return PairDecision{d.a, d.b, path_name(d.path), d.direct, d.reason};
}
}  // namespace

PairDecision decide_pair(const Options& opts, int dev_a, int dev_b) {
  const System sys = load_system(opts);
  const Level level = p2p_level(opts, sys);  // the only throw: an invalid PEERLINK_P2P_LEVEL
  const LiveChecks live = cached_live_checks(sys);
  Decision d;
  try {
    d = decide(opts, sys, level, dev_a, dev_b, live.can_access_peer ? &live : nullptr);
  } catch (const std::exception& e) {
    d.a = dev_a;
    d.b = dev_b;
    d.direct = false;
    d.reason = cat("topology decision failed (", e.what(), "); relay to be safe");
  }
  common::log_line(LogLevel::Trace, opts.log_level,
                   cat("topology: GPU", dev_a, " <-> GPU", dev_b, ": ", path_name(d.path), " ",
                       d.direct ? "direct" : "relay", " - ", d.reason));
  return to_public(d);
}

PairDecision decide_pair_by_bus_id(const Options& opts, const std::string& bus_a, const std::string& bus_b) {
  const std::string a = normalize_bus_id(bus_a), b = normalize_bus_id(bus_b);
  System sys;
  if (!opts.topo_file.empty()) {
    sys = load_system(opts);
  } else {
    // Only these two GPUs, located in sysfs (this process may see neither through the runtime).
    const std::string key = cat("pair:", a, "|", b);
    std::unique_lock<std::mutex> lk(g_mu);
    auto it = g_systems.find(key);
    if (it != g_systems.end()) {
      sys = it->second;
    } else {
      lk.unlock();
      ProbeOptions po;
      po.bus_ids = {a, b};
      try {
        sys = probe_sysfs(po);
      } catch (const std::exception& e) {
        sys = System{};
        sys.warnings.push_back(cat("topology probe failed: ", e.what()));
      }
      log_warnings(opts, sys);
      lk.lock();
      sys = g_systems.emplace(key, std::move(sys)).first->second;
    }
  }
  int ia = -1, ib = -1;
  for (const Gpu& g : sys.gpus) {
    if (!a.empty() && g.bus_id == a) ia = g.index;
    if (!b.empty() && g.bus_id == b) ib = g.index;
  }
  const Level level = p2p_level(opts, sys);
  if (ia < 0 || ib < 0) {
    PairDecision d{ia, ib, "SYS", false,
                   cat("GPU ", ia < 0 ? bus_a : bus_b, " is not in the topology from ", sys.source, "; relay to be safe")};
    if (!bus_a.empty() && a == b) d = PairDecision{ia, ib, "LOC", true, "same GPU"};
    return d;
  }
  const LiveChecks live = cached_live_checks(sys);
  Decision d;
  try {
    d = decide(opts, sys, level, ia, ib, live.can_access_peer ? &live : nullptr);
  } catch (const std::exception& e) {
    d.a = ia;
    d.b = ib;
    d.reason = cat("topology decision failed (", e.what(), "); relay to be safe");
  }
  return to_public(d);
}

std::vector<PairDecision> decide_all_pairs(const Options& opts) {
  const System sys = load_system(opts);
  const LiveChecks live = cached_live_checks(sys);
  std::vector<PairDecision> out;
  for (const Decision& d : decide_all(opts, sys, live.can_access_peer ? &live : nullptr)) out.push_back(to_public(d));
  return out;
}

std::string explain(const Options& opts) {
  const System sys = load_system(opts);
  const Level level = p2p_level(opts, sys);
  const LiveChecks live = cached_live_checks(sys);
  return render_text(sys, level, decide_all(opts, sys, live.can_access_peer ? &live : nullptr));
}

}  // namespace peerlink::topology
