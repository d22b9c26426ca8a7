// Loading the System for a set of Options, and rendering decisions as text (nvidia-smi topo -m
// style) or JSON (the schema in ARCHITECTURE.md). Used by the public entry points and the CLI.
#pragma once
#include <string>
#include <vector>

#include "peerlink/options.h"
#include "topology/policy.h"
#include "topology/system.h"

namespace peerlink::topology {

// opts.topo_file -> that XML; otherwise this machine ("/"). Cached per process (the machine does
// not change; an XML file is re-read when its size or mtime changes). Warnings are logged once
// per load at opts.log_level. Never throws.
System load_system(const Options& opts);

// Live checks for `sys` when its GPUs are this process's runtime devices, else none. The copy
// check result is cached per process and bus id pair.
LiveChecks cached_live_checks(const System& sys);

std::string render_text(const System& sys, const Level& level, const std::vector<Decision>& pairs);
std::string render_json(const System& sys, const Level& level, const std::vector<Decision>& pairs);

}  // namespace peerlink::topology
