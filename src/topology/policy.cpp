// P2P policy. Order of the rules (first match wins):
//   1. PEERLINK_P2P_DISABLE=1                     -> relay (everything, NVLink too)
//   2. PEERLINK_TRANSPORT=relay|direct            -> that, without looking further
//   3. path unknown                               -> relay, unless PEERLINK_P2P_LEVEL=SYS
//   4. NVLink                                     -> direct, unless PEERLINK_P2P_LEVEL=LOC
//   5. PCIe path <= P2P level                     -> direct, else relay
//   6. live machine: runtime refuses peer access  -> relay; pattern copy comes back wrong -> relay
#include "topology/policy.h"

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::topology {

Level p2p_level(const Options& opts, const System& sys) {
  Level l;
  if (!opts.p2p_level.empty()) {
    if (!parse_level(opts.p2p_level, &l.level))
      throw InvalidArgument(common::format(
          "PEERLINK_P2P_LEVEL='{}' is not one of LOC, NVL, PIX, PXB, PHB, SYS or 0-4 (0=LOC 1=PIX 2=PXB 3=PHB 4=SYS)",
          opts.p2p_level));
    l.user_set = true;
    l.why = common::format("PEERLINK_P2P_LEVEL={}", opts.p2p_level);
    return l;
  }
  const size_t n = sys.gpus.size();
  if (sys.cpu.is_amd_x86()) {
    // As NCCL: on AMD the CPU forwards P2P traffic well enough that a 2-GPU system may use P2P even
    // across sockets; with more GPUs only within a socket (different root complexes are fine).
    if (n <= 2) {
      l.level = PathType::SYS;
      l.why = common::format("default on AMD x86 with {} GPU{} (<= 2): P2P across sockets too", n, n == 1 ? "" : "s");
    } else {
      l.level = PathType::PHB;
      l.why = common::format("default on AMD x86 with {} GPUs (> 2): P2P within a socket only", n);
    }
  } else {
    l.level = PathType::PXB;
    l.why = common::format("default on {} CPUs: P2P below a PCIe switch only",
                           sys.cpu.vendor.empty() ? "this" : sys.cpu.vendor);
  }
  return l;
}

namespace {
Decision relay(Decision d, std::string why) {
  d.direct = false;
  d.reason = std::move(why);
  return d;
}
}  // namespace

Decision decide(const Options& opts, const System& sys, const Level& level, int a, int b, const LiveChecks* live) {
  Decision d;
  d.a = a;
  d.b = b;
  const int n = static_cast<int>(sys.gpus.size());
  if (a < 0 || b < 0 || a >= n || b >= n) {
    return relay(d, common::format("GPU{} is not in the topology ({} GPU{} from {})", a < 0 || a >= n ? a : b, n,
                                   n == 1 ? "" : "s", sys.source));
  }
  if (a == b) {
    d.path = PathType::LOC;
    d.path_known = d.direct = true;
    d.reason = "same GPU";
    return d;
  }
  const Link& link = sys.links[a][b];
  d.path = link.path;
  d.path_known = link.known;
  const std::string how = common::format(" [{}]", link.detail);
  if (opts.p2p_disable) return relay(d, "PEERLINK_P2P_DISABLE=1 forces relay" + how);
  if (opts.path == Path::Relay) return relay(d, "PEERLINK_TRANSPORT=relay forces relay" + how);
  if (opts.path == Path::Direct) {
    d.direct = true;
    d.reason = "PEERLINK_TRANSPORT=direct forces direct (no policy or live check)" + how;
    return d;
  }
  if (!link.known && !(level.user_set && level.level == PathType::SYS))
    return relay(d, "path unknown, relay to be safe (PEERLINK_P2P_LEVEL=SYS would allow it)" + how);
  if (link.path == PathType::NVL) {
    if (level.level == PathType::LOC) return relay(d, common::format("{} disables P2P, NVLink too", level.why) + how);
    d.direct = true;
    d.reason = "NVLink pairs are always direct" + how;
  } else if (static_cast<int>(link.path) <= static_cast<int>(level.level)) {
    d.direct = true;
    d.reason = common::format("{} is within P2P level {} ({}){}", path_name(link.path), path_name(level.level),
                              level.why, how);
  } else {
    return relay(d, common::format("{} is above P2P level {} ({}); PEERLINK_P2P_LEVEL={} would allow it{}",
                                   path_name(link.path), path_name(level.level), level.why, path_name(link.path), how));
  }
  if (live && live->applies && !live->applies(a, b)) {
    d.reason += "; no live check (a GPU of the pair is not visible to this process)";
    return d;
  }
  if (live && live->can_access_peer) {
    const bool ab = live->can_access_peer(a, b), ba = live->can_access_peer(b, a);
    if (!ab || !ba)
      return relay(d, common::format("the runtime reports no peer access GPU{} -> GPU{} (policy alone: {})", ab ? b : a,
                                     ab ? a : b, d.reason));
  }
  if (live && live->copy_check) {
    const std::string err = live->copy_check(a, b);
    if (!err.empty())
      return relay(d, common::format("live P2P copy check failed: {} (policy alone: {})", err, d.reason));
    d.reason += "; live P2P copy check passed";
  }
  return d;
}

std::vector<Decision> decide_all(const Options& opts, const System& sys, const LiveChecks* live) {
  const Level level = p2p_level(opts, sys);
  std::vector<Decision> out;
  const int n = static_cast<int>(sys.gpus.size());
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) out.push_back(decide(opts, sys, level, a, b, live));
  return out;
}

}  // namespace peerlink::topology
