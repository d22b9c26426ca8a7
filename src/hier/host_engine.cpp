// The host backend's inter-node engine (peerlink/multinode.h make_host_engine): a peerlink host
// Communicator among the engine's members, whose id is not node-scoped, so processes that claim
// different nodes still meet through this machine's shared memory. It exists so that CI, which has
// neither GPUs nor a real NCCL, runs every two-level plan across simulated nodes with the same code
// that drives the real NCCL on GPUs. Reductions use peerlink's host collectives (at most 8 members);
// data movement uses grouped send/recv (any size, any member count).
#include <algorithm>
#include <cstring>

#include "common/format.h"
#include "peerlink/errors.h"
#include "peerlink/multinode.h"

namespace peerlink {
namespace {

class HostEngine : public InterNodeEngine {
 public:
  HostEngine(const std::string& id, int rank, int size, const Options& opts)
      : id_(id), opts_(opts), comm_(std::make_unique<Communicator>(id, rank, size, kHostDevice, opts)) {}

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->world_size(); }
  std::string name() const override { return "shared-memory stand-in"; }

  void allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, void*) override {
    peerlink::allreduce(*comm_, send, recv, count, dtype, op);
  }
  void reduce_scatter(const void* send, void* recv, size_t recvcount, DataType dtype, ReduceOp op, void*) override {
    peerlink::reduce_scatter(*comm_, send, recv, recvcount, dtype, op);
  }
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root, void*) override {
    peerlink::reduce(*comm_, send, recv, count, dtype, op, root);
  }
  void all_gather(const void* send, void* recv, size_t bytes, void*) override {
    char* out = static_cast<char*>(recv);
    comm_->group_start();
    for (int q = 0; q < size(); ++q) {
      if (q == rank()) continue;
      comm_->send(q, send, bytes, nullptr);
      comm_->recv(q, out + q * bytes, bytes, nullptr);
    }
    comm_->group_end();
    if (out + rank() * bytes != send) std::memmove(out + rank() * bytes, send, bytes);
  }
  void broadcast(const void* send, void* recv, size_t bytes, int root, void*) override {
    if (root < 0 || root >= size())
      throw InvalidArgument(common::format("stand-in broadcast: root {} of {}", root, size()));
    comm_->group_start();
    if (rank() == root) {
      for (int q = 0; q < size(); ++q)
        if (q != root) comm_->send(q, send, bytes, nullptr);
    } else {
      comm_->recv(root, recv, bytes, nullptr);
    }
    comm_->group_end();
    if (rank() == root && send != recv) std::memmove(recv, send, bytes);
  }
  void group_start() override { comm_->group_start(); }
  void group_end() override { comm_->group_end(); }
  void send(int peer, const void* buf, size_t bytes, void*) override { comm_->send(peer, buf, bytes, nullptr); }
  void recv(int peer, void* buf, size_t bytes, void*) override { comm_->recv(peer, buf, bytes, nullptr); }

  void exchange(const void* mine, size_t bytes, void* all) override {
    // allgather_bytes carries at most kMaxAllgatherBytes per rank and call: in pieces.
    const size_t piece = Communicator::kMaxAllgatherBytes;
    std::vector<char> tmp(piece * static_cast<size_t>(size()));
    for (size_t at = 0; at < bytes || at == 0; at += piece) {
      size_t n = std::min(piece, bytes - at);
      comm_->allgather_bytes(static_cast<const char*>(mine) + at, n, tmp.data());
      for (int q = 0; q < size(); ++q)
        std::memcpy(static_cast<char*>(all) + q * bytes + at, tmp.data() + q * n, n);
      if (bytes == 0) break;
    }
  }

  std::unique_ptr<InterNodeEngine> split(int color, int key) override {
    SplitMembers m = split_members(*this, color, key);
    const int n = splits_++;
    if (color == kNoColor) return nullptr;
    return make_host_engine(common::format("{}.s{}c{}", id_, n, color), m.rank, static_cast<int>(m.members.size()),
                            opts_);
  }

  std::unique_ptr<InterNodeEngine> shrink(const std::vector<int>& excluded) override {
    std::string id = common::format("{}.k{}x", id_, shrinks_++);
    int below = 0;
    for (int e : excluded) {
      id += std::to_string(e) + ".";
      below += e < rank();
    }
    return make_host_engine(id, rank() - below, size() - static_cast<int>(excluded.size()), opts_);
  }

  void check_async_error() override { comm_->check_async_error(); }
  void abort() noexcept override {
    try {
      comm_->close();
    } catch (...) {  // abort reports nothing
    }
  }
  void revoke() override { comm_->close(); }

 private:
  std::string id_;
  Options opts_;
  std::unique_ptr<Communicator> comm_;
  int splits_ = 0, shrinks_ = 0;
};

}  // namespace

std::unique_ptr<InterNodeEngine> make_host_engine(const std::string& id, int rank, int size, const Options& opts) {
  return std::make_unique<HostEngine>(id, rank, size, opts);
}

}  // namespace peerlink
