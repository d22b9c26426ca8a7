// What a process group's calls run on, for one device kind: the collectives and grouped
// point-to-point calls its methods are made of (primitives.h). Two kinds:
//   - a group within one node: a peerlink Communicator (make_node_group_comm);
//   - a group spanning nodes: a HierCommunicator (peerlink/multinode.h), peerlink inside each node
//     and, between nodes, torch process groups made by the backend maker that peerlink.torch's
//     creator passes (ProcessGroupNCCL for CUDA tensors, ProcessGroupGloo for CPU tensors).
// Counts are elements of `dtype`, bytes where named so; every call is enqueued on `stream` (the
// current stream of the call, host backend: nullptr and synchronous).
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <c10/core/Device.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "node_map.h"
#include "peerlink/collectives.h"
#include "peerlink/communicator.h"

namespace peerlink::pt {

class GroupComm {
 public:
  virtual ~GroupComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, void* stream) = 0;
  virtual void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root,
                      void* stream) = 0;
  virtual void reduce_scatter(const void* send, void* recv, size_t recvcount, DataType dtype, ReduceOp op,
                              void* stream) = 0;
  virtual void all_gather(const void* send, void* recv, size_t count, DataType dtype, void* stream) = 0;
  virtual void broadcast(void* buf, size_t count, DataType dtype, int root, void* stream) = 0;
  virtual void all_to_all(const void* send, void* recv, size_t count_per_peer, DataType dtype, void* stream) = 0;
  // Counts and displacements per peer, in elements of dtype; send and recv do not overlap.
  virtual void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                            const size_t* recv_counts, const size_t* recv_displs, DataType dtype, void* stream) = 0;
  // Sends and receives (bytes, peers other than this rank) between the two are issued together.
  virtual void group_start() = 0;
  virtual void group_end() = 0;
  virtual void send(int peer, const void* buf, size_t bytes, void* stream) = 0;
  virtual void recv(int peer, void* buf, size_t bytes, void* stream) = 0;
  // Blocks until every rank called it (the host: the callers synchronized their streams first).
  virtual void barrier() = 0;
  // Throws what the device or the engines recorded for earlier calls (collectives / p2p used).
  virtual void check_errors(bool collectives_used, bool p2p_used) = 0;
  // Every later call fails; what is queued has run when drain was asked (the caller synchronized).
  virtual void close() = 0;
  // The node's Communicator when the group is within one node (the fused epilogue runs there
  // only); null for a group spanning nodes.
  virtual Communicator* single_node() = 0;
};

std::unique_ptr<GroupComm> make_node_group_comm(std::unique_ptr<Communicator> comm);

// Makes a torch backend over `size` ranks that meet through `store` (Python: ProcessGroupNCCL or
// ProcessGroupGloo, as the device kind says: "cuda" or "cpu").
using BackendMaker = std::function<c10::intrusive_ptr<c10d::Backend>(const c10::intrusive_ptr<c10d::Store>& store,
                                                                     int rank, int size, const std::string& device)>;

struct HierGroupSetup {
  c10::intrusive_ptr<c10d::Store> store;  // the group's store
  std::string prefix;                     // this communicator's keys in it
  std::string job_id;                     // the communicator's unique id (node communicators derive theirs)
  int rank = 0, size = 0;
  c10::Device device{c10::DeviceType::CPU};  // CPU: the host backend
  NodeMap nodes;                          // from the group's creation
  Options opts;
  BackendMaker make_backend;
};
// Collective over the group: the node communicators, then the engines between nodes.
std::unique_ptr<GroupComm> make_hier_group_comm(HierGroupSetup setup);

}  // namespace peerlink::pt
