// A process group within one node: its calls are peerlink's collectives and stream-ordered
// send/recv on one Communicator (group_comm.h).
#include "group_comm.h"

namespace peerlink::pt {
namespace {

class NodeGroupComm final : public GroupComm {
 public:
  explicit NodeGroupComm(std::unique_ptr<Communicator> comm) : comm_(std::move(comm)) {}

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->world_size(); }
  void allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, void* stream) override {
    peerlink::allreduce(*comm_, send, recv, count, dtype, op, stream);
  }
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root,
              void* stream) override {
    peerlink::reduce(*comm_, send, recv, count, dtype, op, root, stream);
  }
  void reduce_scatter(const void* send, void* recv, size_t recvcount, DataType dtype, ReduceOp op,
                      void* stream) override {
    peerlink::reduce_scatter(*comm_, send, recv, recvcount, dtype, op, stream);
  }
  void all_gather(const void* send, void* recv, size_t count, DataType dtype, void* stream) override {
    peerlink::all_gather(*comm_, send, recv, count, dtype, stream);
  }
  void broadcast(void* buf, size_t count, DataType dtype, int root, void* stream) override {
    peerlink::broadcast(*comm_, buf, buf, count, dtype, root, stream);
  }
  void all_to_all(const void* send, void* recv, size_t count_per_peer, DataType dtype, void* stream) override {
    peerlink::all_to_all(*comm_, send, recv, count_per_peer, dtype, stream);
  }
  void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                    const size_t* recv_counts, const size_t* recv_displs, DataType dtype, void* stream) override {
    peerlink::all_to_all_v(*comm_, send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype, stream);
  }
  void group_start() override { comm_->group_start(); }
  void group_end() override { comm_->group_end(); }
  void send(int peer, const void* buf, size_t bytes, void* stream) override { comm_->send(peer, buf, bytes, stream); }
  void recv(int peer, void* buf, size_t bytes, void* stream) override { comm_->recv(peer, buf, bytes, stream); }
  void barrier() override { comm_->barrier(); }
  void check_errors(bool collectives_used, bool p2p_used) override {
    if (collectives_used) peerlink::allreduce_check(*comm_);
    if (p2p_used) comm_->check_async_error();
  }
  void close() override { comm_->close(); }
  Communicator* single_node() override { return comm_.get(); }

 private:
  std::unique_ptr<Communicator> comm_;
};

}  // namespace

std::unique_ptr<GroupComm> make_node_group_comm(std::unique_ptr<Communicator> comm) {
  return std::make_unique<NodeGroupComm>(std::move(comm));
}

}  // namespace peerlink::pt
