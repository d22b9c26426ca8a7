// Which node every rank of a process group runs on, learnt when the group is created: each rank
// publishes its host identity in the group's store and reads the others'. The identity comes from
// Python (peerlink.torch: PEERLINK_HOSTID, else NCCL_HOSTID, else hostname + boot id), as the
// multi-node layer defines it.
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>
#include <vector>

namespace peerlink::pt {

struct NodeMap {
  std::vector<std::string> hosts;  // distinct identities, in the order of their lowest rank
  std::vector<int> node_of_rank;   // index into hosts, per group rank
  int nodes() const { return static_cast<int>(hosts.size()); }
  // "host 'a': ranks 0-3; host 'b': ranks 4-7"
  std::string describe() const;
};

// Collective over the group: every rank publishes `host_id` under `prefix` and waits (the store's
// timeout) for the others'.
NodeMap exchange_node_map(c10d::Store& store, const std::string& prefix, int rank, int size, const std::string& host_id);

}  // namespace peerlink::pt
