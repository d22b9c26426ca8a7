// Communicators whose ranks meet through the multi-node rendezvous of the unique id (peerlink/
// multinode.h): the node map decides, the same on every rank, between a peerlink communicator
// (one node) and a HierCommunicator (several nodes: peerlink inside each, the real NCCL between).
#pragma once
#include <vector>

#include "shim.h"
#include "unique_id.h"

namespace peerlink::nccl {

// Runs at the init op (it blocks): meets, then creates `c` as the node map says; sets route, pl or
// hier, ready; on failure the last error and init_result. `cfg`: the caller's config, copied.
ncclResult_t init_by_meeting(ncclComm* c, const IdInfo& info, const ncclConfig_t* cfg, const char* what);
// ncclCommSplit / ncclCommShrink of a Route::Hier communicator: the child is one node's peerlink
// communicator or a HierCommunicator, from the parent's node map (no new meeting). `child` is null
// for a NOCOLOR rank, which still takes part.
ncclResult_t split_hier(ncclComm* parent, int color, int key, ncclComm* child);
ncclResult_t shrink_hier(ncclComm* parent, const std::vector<int>& excluded, ncclComm* child);
// The real communicator that carries what a Route::Hier communicator forwards (its world engine's);
// null with the last error set on the host backend's stand-in.
ncclComm_t hier_real_comm(ncclComm* c, const char* what);

}  // namespace peerlink::nccl
