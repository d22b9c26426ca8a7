// The P2P policy: for each GPU pair, direct or relay, and why. Pure function of the System, the
// Options and (on a live machine) the runtime's answers, which are injectable for tests.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "peerlink/options.h"
#include "topology/system.h"

namespace peerlink::topology {

// What the live machine says about a pair; only consulted for pairs the policy would make direct.
struct LiveChecks {
  // False when the pair's GPUs are not this process's runtime devices (then nothing is checked and
  // the reason says so). Unset: always applies.
  std::function<bool(int a, int b)> applies;
  std::function<bool(int a, int b)> can_access_peer;    // the runtime's peer-access answer (a -> b)
  std::function<std::string(int a, int b)> copy_check;  // "" when a real copy a<->b came back intact
};

// gpu::can_access_peer and a real copy with a known pattern in both directions (runtime.h only).
LiveChecks runtime_live_checks();
// The copy check on its own for runtime devices a and b; "" or what went wrong (devices, offset).
std::string runtime_copy_check(int a, int b);

struct Level {
  PathType level = PathType::PXB;
  std::string why;  // "PEERLINK_P2P_LEVEL=PHB" or "default for ..."
  bool user_set = false;
};
// The effective P2P level. Throws InvalidArgument when opts.p2p_level is not a level.
Level p2p_level(const Options& opts, const System& sys);

struct Decision {
  int a = 0, b = 0;
  PathType path = PathType::SYS;
  bool path_known = false;
  bool direct = false;
  std::string reason;  // the rule (and env var) that decided, then how the path was found
};

// Never throws for machine problems; `live` may be null (fixtures, XML, CLI without checks).
Decision decide(const Options& opts, const System& sys, const Level& level, int a, int b, const LiveChecks* live);
// Every unordered pair a < b.
std::vector<Decision> decide_all(const Options& opts, const System& sys, const LiveChecks* live);

}  // namespace peerlink::topology
