// The c10d backend "peerlink": a torch.distributed process group whose calls run on peerlink.
//
// One peerlink communicator per device kind the group's tensors live on (its CUDA device, and the
// host backend for CPU tensors), created by the group's first call on that kind: rank 0 makes a
// unique id and shares it through the group's store, as ProcessGroupNCCL shares NCCL's. A group
// whose ranks run on several nodes (host identities exchanged at creation) gets a multi-node
// communicator instead: peerlink inside each node, torch backends between nodes (group_comm.h).
// Calls on CUDA tensors are stream-ordered (device_comm.h, work.h); on CPU tensors they run on the
// host backend before returning. Dtypes and reduce ops: dtype_route.h.
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device_comm.h"
#include "dtype_route.h"
#include "node_map.h"
#include "primitives.h"

namespace peerlink::pt {

class ProcessGroupPeerlink : public c10d::Backend {
 public:
  struct Config {
    std::string group_name;
    std::string host_id;                          // this process's host identity (node_map.h)
    std::string uid_prefix = "pt";                // start of the communicators' unique ids (SHM names)
    std::chrono::milliseconds timeout{60000};     // Options::timeout of the group's communicators
    BackendMaker make_backend;                    // between nodes (group_comm.h); empty: one node only
  };
  // Collective over the group (exchanges host identities through the store).
  ProcessGroupPeerlink(c10::intrusive_ptr<c10d::Store> store, int rank, int size, Config cfg);
  ~ProcessGroupPeerlink() override;

  const std::string getBackendName() const override { return "peerlink"; }
  bool supportsCoalescing() const override { return true; }
  void setTimeout(std::chrono::milliseconds timeout) override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_; }
  void shutdown() override;
  void abort() override;
  void eagerConnectSingleDevice(at::Device device) override;

  // ---- pg_reduce.cpp
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;

  // ---- pg_move.cpp
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // ---- torch.ops.peerlink (ops.cpp): synchronous on the current stream, no Work.
  using Body = std::function<void(const Launch&)>;
  void run_sync(const char* what, const at::Device& device, const Body& body);
  const NodeMap& node_map() const { return nodes_; }

 private:
  // The communicator of a device kind, created by its first call (collective over the group).
  std::shared_ptr<DeviceComm> comm_for(const at::Device& device, const char* what);
  std::unique_ptr<GroupComm> make_communicator(const at::Device& device, int device_index);
  // Runs body on a launch of device's communicator and wraps it in a Work. keep: tensors an
  // asynchronous call must keep alive (inputs, scratch); outputs: Work::result and the future's value.
  c10::intrusive_ptr<c10d::Work> run(const char* what, c10d::OpType type, const at::Device& device, bool async,
                                     std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep, const Body& body);
  c10::intrusive_ptr<c10d::Work> p2p(const char* what, bool send, at::Tensor& t, int peer);
  // shutdown (drain: after the queued calls ran) and abort (at once).
  void close_all(bool drain);

  c10::intrusive_ptr<c10d::Store> store_;
  Config cfg_;
  std::string prefix_;  // store keys of this incarnation of the group
  NodeMap nodes_;
  std::mutex mu_;       // comms_ and the coalescing state
  std::map<int, std::shared_ptr<DeviceComm>> comms_;  // by device index (kHostDevice for CPU)
  uint64_t seq_ = 0;
  bool shut_down_ = false;  // shutdown() / abort() ran: every later call is an error
  // Between startCoalescing and endCoalescing: collectives run at once (asynchronously) and their
  // Works are collected; sends and receives wait for endCoalescing, which issues them as one group.
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;
  std::vector<std::pair<P2PItem, at::Tensor>> pending_p2p_;
};

}  // namespace peerlink::pt
