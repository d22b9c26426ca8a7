// HierCommunicator's state (peerlink/multinode.h), shared by its files: hier_comm.cpp
// (construction, children, errors), hier_plans.cpp (collectives), hier_p2p.cpp (send/recv and the
// ops built of them).
#pragma once
#include <atomic>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "peerlink/multinode.h"

namespace peerlink {

struct HierCommunicator::Impl {
  int rank = -1, nranks = 0, device = kHostDevice;
  std::string job_id;
  NodeMap map;
  Options opts;
  int node = 0, local_rank = 0, local_size = 1;
  std::unique_ptr<Communicator> node_comm;  // null when this node has one rank
  bool node_p2p = true;                     // same-node send/recv on node_comm (else the world engine)
  std::unique_ptr<InterNodeEngine> world;   // every rank
  std::unique_ptr<InterNodeEngine> rail;    // the ranks of this local index, one per node; null when
                                            // the two-level plans cannot apply (see rail_reason)
  const char* rail_reason = nullptr;        // why there is no rail
  int splits = 0, shrinks = 0;
  // A two-level plan ran a peerlink collective on node_comm: from then on check_async_error reads
  // the collectives' device error word (allreduce_check, which would set up state before).
  std::atomic<bool> used_node_collectives{false};

  // Scratch of the two-level plans, one buffer per stream (ops on one stream are ordered; ops on two
  // streams may overlap, so they never share one). Grown by doubling; a buffer a captured graph
  // may still use is never freed before the communicator (retired).
  std::mutex scratch_mu;
  std::map<void*, std::pair<void*, size_t>> scratch;
  std::vector<void*> retired;
  void* scratch_for(void* stream, size_t bytes);

  // Grouped send/recv (hier_p2p.cpp).
  struct P2p {
    bool is_send;
    int peer;
    void* buf;
    size_t bytes;
    void* stream;
  };
  int group_depth = 0;
  std::vector<P2p> pending;
  void issue(std::vector<P2p> ops);

  // A stream-ordered local copy (host backend: memcpy).
  void copy(void* dst, const void* src, size_t bytes, void* stream);
  // Why a collective of `bytes` (the whole buffer) runs whole on the world engine; null = it may
  // take the two-level plan.
  const char* whole_reason(size_t bytes) const;

  ~Impl();
};

// The element type peerlink's collectives move `bytes` as, for data movement (no arithmetic): the
// widest of 8, 4, 2 bytes that divides `bytes` and every address; false when none (odd sizes).
bool movement_type(size_t bytes, std::initializer_list<const void*> ptrs, DataType* out, size_t* elem);

}  // namespace peerlink
