// Which data path a pair uses when Options::path is Auto: the topology policy for GPU pairs.
#pragma once
#include <string>
#include <vector>

#include "peerlink/options.h"

namespace peerlink::detail {

struct PathChoice {
  Path path;
  std::string reason;
};

// Deterministic in (opts, my_device, peer_device) so both sides of a pair agree.
PathChoice choose_path(const Options& opts, int my_device, int peer_device);

// The path from this rank to every rank (index = rank), from the topology policy for GPU pairs:
// `bus_ids[r]` is rank r's GPU bus id ("" for host-memory ranks). Forced settings
// (PEERLINK_TRANSPORT, PEERLINK_P2P_DISABLE) win; both sides of a pair compute the same answer.
std::vector<PathChoice> choose_paths(const Options& opts, int rank, const std::vector<std::string>& bus_ids);

}  // namespace peerlink::detail
