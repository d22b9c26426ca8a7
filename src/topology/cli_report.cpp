// topology::cli_report: the body of the peerlink-topo CLI behind the public header.
#include "common/log.h"
#include "peerlink/errors.h"
#include "peerlink/topology.h"
#include "topology/policy.h"
#include "topology/probe.h"
#include "topology/report.h"

namespace peerlink::topology {

Report cli_report(const Options& opts_in, const ReportRequest& req) {
  if (!req.xml.empty() && !req.sysfs_root.empty())
    throw InvalidArgument("topology report: xml and sysfs_root exclude each other");
  Options opts = opts_in;
  opts.log_level = LogLevel::None;  // warnings are part of the result
  System sys;
  bool on_this_machine = false;
  if (!req.xml.empty()) {
    sys = system_from_nccl_xml_file(req.xml);
  } else if (!req.sysfs_root.empty()) {
    ProbeOptions po;
    po.root = req.sysfs_root;
    sys = probe_sysfs(po);
    on_this_machine = sys.live;
  } else {
    sys = load_system(opts);
    on_this_machine = opts.topo_file.empty();
  }
  const Level level = p2p_level(opts, sys);
  LiveChecks live;
  if (req.live_check && on_this_machine) live = cached_live_checks(sys);
  const std::vector<Decision> pairs = decide_all(opts, sys, live.can_access_peer ? &live : nullptr);
  Report r;
  r.output = req.json ? render_json(sys, level, pairs) : render_text(sys, level, pairs);
  r.warnings = sys.warnings;
  return r;
}

}  // namespace peerlink::topology
