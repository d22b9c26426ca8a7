// Which node and which machine a rank runs on, and unique ids that carry their maker's node.
//
// A node is what NCCL calls a host: ranks of one node meet through shared memory, ranks of
// different nodes through an inter-node engine (src/hier/). Its identity is the string
// Options::host_id (PEERLINK_HOSTID, else NCCL_HOSTID) when set, else the hostname up to its first
// '.' and the boot id, as NCCL's host hash: hostnames repeat across containers and machines, a boot
// id does not. The machine is the running kernel (its boot id alone): ranks that claim one node
// must run on one machine, since they meet through its /dev/shm.
#pragma once
#include <cstdint>
#include <string>

namespace peerlink::bootstrap {

struct HostIdentity {
  uint64_t node = 0;     // FNV-1a of the node identity string
  uint64_t machine = 0;  // FNV-1a of the boot id
  std::string name;      // for messages: Options::host_id when set, else the hostname (at most 63 characters)
  std::string hostname;  // the machine's hostname (at most 63 characters)
};

// `configured` is Options::host_id ("" = hostname + boot id).
HostIdentity host_identity(const std::string& configured);

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ULL);

// A Communicator unique id that carries its maker's node: "pl-<16 hex random>@<name>.<16 hex node>".
std::string make_node_unique_id(const HostIdentity& maker);
// True when `id` has that form (then *node and *name are the maker's); false for any other id.
bool parse_node_unique_id(const std::string& id, uint64_t* node, std::string* name);

}  // namespace peerlink::bootstrap
