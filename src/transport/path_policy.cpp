#include "transport/path_policy.h"

#include <algorithm>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/topology.h"

namespace peerlink::detail {

std::vector<PathChoice> choose_paths(const Options& opts, int rank, const std::vector<std::string>& bus_ids) {
  std::vector<PathChoice> out(bus_ids.size(), PathChoice{Path::Direct, "self"});
  // Forced settings apply to every pair, host-memory ranks included (so CI covers the relay).
  if (opts.path == Path::Relay) return std::vector<PathChoice>(bus_ids.size(), {Path::Relay, "PEERLINK_TRANSPORT=relay"});
  if (opts.p2p_disable) return std::vector<PathChoice>(bus_ids.size(), {Path::Relay, "PEERLINK_P2P_DISABLE=1"});
  if (opts.path == Path::Direct) return std::vector<PathChoice>(bus_ids.size(), {Path::Direct, "PEERLINK_TRANSPORT=direct"});
  if (bus_ids[rank].empty())
    return std::vector<PathChoice>(bus_ids.size(), {Path::Direct, "host memory: direct mapping of the peer's SHM"});
  // The job's distinct GPUs, in bus-id order (the same list on every rank).
  std::vector<std::string> gpus;
  for (const auto& b : bus_ids)
    if (!b.empty()) gpus.push_back(b);
  std::sort(gpus.begin(), gpus.end());
  gpus.erase(std::unique(gpus.begin(), gpus.end()), gpus.end());
  auto index_of = [&](const std::string& b) { return int(std::find(gpus.begin(), gpus.end(), b) - gpus.begin()); };
  std::vector<topology::PairDecision> pairs = gpus.size() > 1 ? topology::decide_job_pairs(opts, gpus)
                                                              : std::vector<topology::PairDecision>{};
  for (size_t p = 0; p < bus_ids.size(); ++p) {
    if (static_cast<int>(p) == rank) continue;
    if (bus_ids[p].empty()) {
      out[p] = {Path::Direct, "peer uses host memory"};
      continue;
    }
    if (bus_ids[p] == bus_ids[rank]) {
      out[p] = {Path::Direct, common::format("same GPU {}", bus_ids[p]), true};
      continue;
    }
    int a = std::min(index_of(bus_ids[rank]), index_of(bus_ids[p])), b = std::max(index_of(bus_ids[rank]), index_of(bus_ids[p]));
    out[p] = {Path::Relay, "topology gave no decision for this pair"};
    for (const auto& d : pairs)
      if (d.a == a && d.b == b)
        out[p] = {d.direct ? Path::Direct : Path::Relay, common::format("{}: {}", d.path, d.reason),
                  d.direct && d.path == "NVL"};
  }
  return out;
}

}  // namespace peerlink::detail
