#include "transport/path_policy.h"

#include "common/log.h"
#include "gpu/runtime.h"

namespace peerlink::detail {

PathChoice choose_path(const Options& opts, int my_device, int peer_device) {
  using common::cat;
  if (opts.path == Path::Relay) return {Path::Relay, "PEERLINK_TRANSPORT=relay"};
  if (opts.p2p_disable) return {Path::Relay, "PEERLINK_P2P_DISABLE=1"};
  if (opts.path == Path::Direct) return {Path::Direct, "PEERLINK_TRANSPORT=direct"};
  if (my_device < 0 || peer_device < 0) return {Path::Direct, "host memory: direct mapping of the peer's SHM"};
  if (my_device == peer_device) return {Path::Direct, cat("same GPU ", my_device)};
  if (!gpu::can_access_peer(my_device, peer_device))
    return {Path::Relay, cat("the runtime reports no peer access between GPU ", my_device, " and ", peer_device)};
  return {Path::Direct, cat("peer access between GPU ", my_device, " and ", peer_device)};
}

}  // namespace peerlink::detail
