// Which data path a pair uses when Options::path is Auto: the topology policy for GPU pairs.
#pragma once
#include <string>

#include "peerlink/options.h"

namespace peerlink::detail {

struct PathChoice {
  Path path;
  std::string reason;
};

// Deterministic in (opts, my_device, peer_device) so both sides of a pair agree.
PathChoice choose_path(const Options& opts, int my_device, int peer_device);

}  // namespace peerlink::detail
