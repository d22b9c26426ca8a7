// Which data path each pair uses: forced settings first, then the topology policy for GPU pairs.
#pragma once
#include <string>
#include <vector>

#include "peerlink/options.h"

namespace peerlink::detail {

struct PathChoice {
  Path path;
  std::string reason;
  // The pair's GPUs are one GPU or joined by NVLink (topology path LOC or NVL): stores of a warp to
  // one 128-byte line arrive whole, which the collectives' LL128 lines rely on. False for PCIe
  // pairs, host memory, forced settings (the link is not looked at) and unknown topology.
  bool nvlink = false;
};

// The path from this rank to every rank (index = rank): `bus_ids[r]` is rank r's GPU bus id ("" for
// host-memory ranks). PEERLINK_TRANSPORT and PEERLINK_P2P_DISABLE win; GPU pairs follow the topology
// policy over the job's GPUs. Both sides of a pair compute the same answer from the same inputs.
std::vector<PathChoice> choose_paths(const Options& opts, int rank, const std::vector<std::string>& bus_ids);

}  // namespace peerlink::detail
