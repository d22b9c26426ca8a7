// Public entry points (peerlink/topology.h), the per-process caches and the live-check wiring.
// Caches hold machine facts only (probe results, copy-check outcomes), never configuration: the
// Options of each call decide.
#include "peerlink/topology.h"

#include <sys/stat.h>

#include <map>
#include <mutex>

#include "common/format.h"
#include "common/log.h"
#include "gpu/runtime.h"
#include "topology/probe.h"
#include "topology/report.h"

namespace peerlink::topology {

namespace {

std::mutex g_mu;
std::mutex g_check_mu;  // held across a live copy check (cached_live_checks)
// Held across a probe (load_system, job_system): communicators created at once on several threads
// of one process (nccl-tests -g 2 / -t 2) share one probe instead of running NVML and sysfs reads
// concurrently. On 2x H200 a third of such nccl-tests runs decided "relay" for the NVLink pair
// (reason not found); concurrent probes were one candidate, now excluded.
std::mutex g_probe_mu;
std::map<std::string, System> g_systems;           // "machine" or "xml:<path>:<size>:<mtime>"
std::map<std::string, std::string> g_copy_checks;  // "<bus a>|<bus b>" -> "" or the failure

void log_warnings(const Options& opts, const System& sys) {
  for (const std::string& w : sys.warnings) common::log_line(LogLevel::Warn, opts.log_level, "topology: " + w);
}

}  // namespace

System load_system(const Options& opts) {
  std::string key = "machine";
  if (!opts.topo_file.empty()) {
    struct stat st {};
    key = stat(opts.topo_file.c_str(), &st) == 0
              ? common::format("xml:{}:{}:{}.{}", opts.topo_file, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec)
              : common::format("xml:{}:missing", opts.topo_file);
  }
  std::lock_guard<std::mutex> one(g_probe_mu);
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
    sys.warnings.push_back(common::format("topology probe failed: {}; no GPUs, every pair relays", e.what()));
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
    } catch (const std::exception&) { continue; }
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
    // One check per pair per process: communicators created at once on several threads (NCCL's
    // -g 2: one thread per rank of one process) wait for the first one's result instead of running
    // their own copies on the same two devices concurrently, so the ranks of one process cannot
    // reach different answers for one pair.
    std::lock_guard<std::mutex> one(g_check_mu);
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
PairDecision to_public(const Decision& d) { return PairDecision{d.a, d.b, path_name(d.path), d.direct, d.reason}; }
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
    d.reason = common::format("topology decision failed ({}); relay to be safe", e.what());
  }
  common::log_line(LogLevel::Trace, opts.log_level,
                   common::format("topology: GPU{} <-> GPU{}: {} {} - {}", dev_a, dev_b, path_name(d.path),
                                  d.direct ? "direct" : "relay", d.reason));
  return to_public(d);
}

namespace {

// The job's GPUs (in the given order) out of a larger System: links are copied; a bus id the
// System lacks becomes a GPU with an unknown path (relay) and a warning.
System subsystem(const System& full, const std::vector<std::string>& ids) {
  System sub;
  sub.source = full.source;
  sub.cpu = full.cpu;
  sub.warnings = full.warnings;
  std::vector<int> from;
  for (size_t i = 0; i < ids.size(); ++i) {
    int found = -1;
    for (const Gpu& g : full.gpus)
      if (!ids[i].empty() && g.bus_id == ids[i]) found = g.index;
    Gpu g;
    if (found >= 0)
      g = full.gpus[found];
    else {
      g.bus_id = ids[i];
      sub.warnings.push_back(common::format("GPU '{}' of the job is not in {}; its pairs relay", ids[i], full.source));
    }
    g.index = static_cast<int>(i);
    sub.gpus.push_back(g);
    from.push_back(found);
  }
  const size_t n = ids.size();
  sub.links.assign(n, std::vector<Link>(n));
  for (size_t a = 0; a < n; ++a)
    for (size_t b = 0; b < n; ++b)
      if (a != b)
        sub.links[a][b] =
            from[a] >= 0 && from[b] >= 0 ? full.links[from[a]][from[b]] : pcie_link(sub.gpus[a], sub.gpus[b]);
  return sub;
}

System job_system(const Options& opts, const std::vector<std::string>& bus_ids) {
  std::vector<std::string> ids;
  std::string key = "job:";
  for (const std::string& b : bus_ids) {
    ids.push_back(normalize_bus_id(b));
    key += (ids.back().empty() ? b : ids.back()) + ",";
  }
  if (!opts.topo_file.empty()) return subsystem(load_system(opts), ids);
  std::lock_guard<std::mutex> one(g_probe_mu);
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_systems.find(key);
    if (it != g_systems.end()) return it->second;
  }
  System sys;
  try {
    ProbeOptions po;  // this machine's sysfs and NVML, for exactly these GPUs
    po.bus_ids = bus_ids;
    sys = probe_sysfs(po);
  } catch (const std::exception& e) {
    sys = System{};
    sys.source = "sysfs:/";
    sys.warnings.push_back(common::format("topology probe failed: {}; no GPUs, every pair relays", e.what()));
  }
  log_warnings(opts, sys);
  std::lock_guard<std::mutex> lk(g_mu);
  return g_systems.emplace(key, std::move(sys)).first->second;
}

}  // namespace

std::vector<PairDecision> decide_job_pairs(const Options& opts, const std::vector<std::string>& bus_ids) {
  const System sys = job_system(opts, bus_ids);
  const Level level = p2p_level(opts, sys);  // the only throw: an invalid PEERLINK_P2P_LEVEL
  const LiveChecks live = cached_live_checks(sys);
  std::vector<PairDecision> out;
  const int n = static_cast<int>(sys.gpus.size());
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      Decision d;
      try {
        d = decide(opts, sys, level, a, b, live.can_access_peer ? &live : nullptr);
      } catch (const std::exception& e) {
        d.a = a;
        d.b = b;
        d.reason = common::format("topology decision failed ({}); relay to be safe", e.what());
      }
      out.push_back(to_public(d));
    }
  }
  return out;
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
