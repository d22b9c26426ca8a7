// InterNodeEngine over a torch backend (pg_engine.h). ProcessGroupNCCL runs every op natively;
// gloo lacks AVG and (in some torch versions) reduce_scatter, so those run as an allreduce here.
#include "pg_engine.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <cstring>

#include "peerlink/errors.h"

namespace peerlink::pt {
namespace {

at::ScalarType scalar_of(DataType t) {
  switch (t) {
    case DataType::F32: return at::kFloat;
    case DataType::F16: return at::kHalf;
    case DataType::BF16: return at::kBFloat16;
    case DataType::F64: return at::kDouble;
    case DataType::I32: return at::kInt;
    case DataType::I64: return at::kLong;
  }
  throw InvalidArgument(c10::str("torch engine: data type ", static_cast<int>(t)));
}

c10d::ReduceOp reduce_op_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return c10d::ReduceOp(c10d::ReduceOp::RedOpType::SUM);
    case ReduceOp::Max: return c10d::ReduceOp(c10d::ReduceOp::RedOpType::MAX);
    case ReduceOp::Min: return c10d::ReduceOp(c10d::ReduceOp::RedOpType::MIN);
    case ReduceOp::Prod: return c10d::ReduceOp(c10d::ReduceOp::RedOpType::PRODUCT);
    case ReduceOp::Avg: return c10d::ReduceOp(c10d::ReduceOp::RedOpType::AVG);
  }
  throw InvalidArgument(c10::str("torch engine: reduce op ", static_cast<int>(op)));
}

class PgEngine final : public InterNodeEngine {
 public:
  PgEngine(PgEngineSetup setup, c10::intrusive_ptr<c10d::Backend> pg)
      : s_(std::move(setup)), pg_(std::move(pg)), native_(pg_->getBackendName() == "nccl") {}
  // A backend left without shutdown warns and aborts its communicators at destruction.
  ~PgEngine() override {
    try {
      pg_->shutdown();
    } catch (...) {  // a destructor reports nothing; the communicators go with the backend
    }
  }
  PgEngine(const PgEngine&) = delete;
  PgEngine& operator=(const PgEngine&) = delete;

  int rank() const override { return pg_->getRank(); }
  int size() const override { return pg_->getSize(); }
  std::string name() const override { return c10::str("torch ", pg_->getBackendName()); }

  void allreduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op, void*) override {
    at::Tensor out = view(recv, count, dt);
    if (send != recv) out.copy_(view(send, count, dt));
    reduce_all(out, op);
  }

  void reduce_scatter(const void* send, void* recv, size_t recvcount, DataType dt, ReduceOp op, void*) override {
    at::Tensor in = view(send, recvcount * size(), dt), out = view(recv, recvcount, dt);
    if (native_) {
      c10d::ReduceScatterOptions o;
      o.reduceOp = reduce_op_of(op);
      pg_->_reduce_scatter_base(out, in, o)->wait();
      return;
    }
    at::Tensor all = in.clone();
    reduce_all(all, op);
    out.copy_(all.narrow(0, static_cast<int64_t>(recvcount) * rank(), static_cast<int64_t>(recvcount)));
  }

  void reduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op, int root, void*) override {
    check_root(root, "reduce");
    // The backend reduces in place and may use a non-root's buffer as scratch: those reduce a copy.
    at::Tensor t = rank() == root ? view(recv, count, dt) : view(send, count, dt).clone();
    if (rank() == root && send != recv) t.copy_(view(send, count, dt));
    if (op == ReduceOp::Avg && !native_) {
      reduce_all(t, op);  // gloo has no AVG: an allreduce, kept by the root
      return;
    }
    c10d::ReduceOptions o;
    o.reduceOp = reduce_op_of(op);
    o.rootRank = root;
    std::vector<at::Tensor> ts{t};
    pg_->reduce(ts, o)->wait();
  }

  void all_gather(const void* send, void* recv, size_t bytes, void*) override {
    at::Tensor in = bytes_view(send, bytes), out = bytes_view(recv, bytes * size());
    if (native_) {
      pg_->_allgather_base(out, in, c10d::AllgatherOptions())->wait();
      return;
    }
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int q = 0; q < size(); ++q) outs[0].push_back(out.narrow(0, static_cast<int64_t>(bytes) * q, bytes));
    std::vector<at::Tensor> ins{rank_block_is(send, recv, bytes) ? in.clone() : in};
    pg_->allgather(outs, ins, c10d::AllgatherOptions())->wait();
  }

  void broadcast(const void* send, void* recv, size_t bytes, int root, void*) override {
    check_root(root, "broadcast");
    at::Tensor t = bytes_view(recv, bytes);
    if (rank() == root && send != recv) t.copy_(bytes_view(send, bytes));
    c10d::BroadcastOptions o;
    o.rootRank = root;
    std::vector<at::Tensor> ts{t};
    pg_->broadcast(ts, o)->wait();
  }

  void group_start() override { ++depth_; }
  void group_end() override {
    if (depth_ <= 0) throw InvalidArgument("torch engine: group_end without group_start");
    if (--depth_ == 0) flush();
  }
  void send(int peer, const void* buf, size_t bytes, void*) override { queue(true, peer, buf, bytes); }
  void recv(int peer, void* buf, size_t bytes, void*) override { queue(false, peer, buf, bytes); }

  void exchange(const void* mine, size_t bytes, void* all) override {
    const std::string base = c10::str(s_.prefix, "x", exchanges_++, "/");
    const uint8_t* m = static_cast<const uint8_t*>(mine);
    s_.store->set(c10::str(base, rank()), std::vector<uint8_t>(m, m + bytes));
    for (int q = 0; q < size(); ++q) {
      std::vector<uint8_t> v = s_.store->get(c10::str(base, q));
      if (v.size() != bytes)
        throw PeerLostError(c10::str("torch engine exchange: rank ", q, " sent ", v.size(), " bytes, expected ", bytes));
      std::memcpy(static_cast<char*>(all) + static_cast<size_t>(q) * bytes, v.data(), bytes);
    }
  }

  std::unique_ptr<InterNodeEngine> split(int color, int key) override;
  std::unique_ptr<InterNodeEngine> shrink(const std::vector<int>& excluded) override;

  void check_async_error() override {}  // the backend reports through its Works, which wait() rethrows
  void abort() noexcept override {
    try {
      pg_->abort();
    } catch (...) {  // abort reports nothing
    }
  }
  void revoke() override { pg_->abort(); }

 private:
  struct P2p {
    bool is_send;
    int peer;
    at::Tensor t;
  };

  at::Tensor view(const void* p, size_t count, DataType dt) const {
    return at::from_blob(const_cast<void*>(p), {static_cast<int64_t>(count)},
                         at::TensorOptions().dtype(scalar_of(dt)).device(s_.device));
  }
  at::Tensor bytes_view(const void* p, size_t bytes) const {
    return at::from_blob(const_cast<void*>(p), {static_cast<int64_t>(bytes)},
                         at::TensorOptions().dtype(at::kByte).device(s_.device));
  }
  bool rank_block_is(const void* send, const void* recv, size_t bytes) const {
    return static_cast<const char*>(recv) + static_cast<size_t>(rank()) * bytes == send;
  }
  void check_root(int root, const char* what) const {
    if (root < 0 || root >= size())
      throw InvalidArgument(c10::str("torch engine ", what, ": root ", root, " of ", size()));
  }

  // In place over the members; gloo's AVG is a SUM divided here (integers round toward zero, as
  // ncclAvg and peerlink's Avg).
  void reduce_all(at::Tensor& t, ReduceOp op) {
    const bool emulate_avg = op == ReduceOp::Avg && !native_;
    c10d::AllreduceOptions o;
    o.reduceOp = reduce_op_of(emulate_avg ? ReduceOp::Sum : op);
    std::vector<at::Tensor> ts{t};
    pg_->allreduce(ts, o)->wait();
    if (emulate_avg) {
      if (at::isFloatingType(t.scalar_type())) t.div_(size());
      else t.copy_(at::div(t, size(), "trunc"));
    }
  }

  void queue(bool is_send, int peer, const void* buf, size_t bytes) {
    if (peer < 0 || peer >= size() || peer == rank())
      throw InvalidArgument(c10::str("torch engine ", is_send ? "send" : "recv", ": peer ", peer, " of ", size(),
                                     " (this rank ", rank(), ")"));
    pending_.push_back({is_send, peer, bytes_view(buf, bytes)});
    if (depth_ == 0) flush();
  }

  void flush();

  PgEngineSetup s_;
  c10::intrusive_ptr<c10d::Backend> pg_;
  bool native_;  // ProcessGroupNCCL
  int depth_ = 0;
  std::vector<P2p> pending_;
  int exchanges_ = 0, splits_ = 0, shrinks_ = 0;
};

// NCCL: one coalesced block, even for one op (its Work covers every op, and it runs on the
// group's communicator: an unbatched send/recv would make ProcessGroupNCCL create a 2-rank
// communicator, which waited forever on simulated nodes on one H100); gloo: each op's Work, all
// issued before any is waited for, so no pattern deadlocks.
void PgEngine::flush() {
  std::vector<P2p> ops;
  ops.swap(pending_);
  if (ops.empty()) return;
  const bool block = native_;
  if (block) pg_->startCoalescing();
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (P2p& o : ops) {
    std::vector<at::Tensor> ts{o.t};
    auto w = o.is_send ? pg_->send(ts, o.peer, 0) : pg_->recv(ts, o.peer, 0);
    if (!block && w) works.push_back(w);
  }
  if (block) {
    auto w = pg_->endCoalescing();
    if (w) works.push_back(w);
  }
  for (auto& w : works) w->wait();
}

std::unique_ptr<InterNodeEngine> PgEngine::split(int color, int key) {
  SplitMembers m = split_members(*this, color, key);
  const int n = splits_++;
  if (color == kNoColor) return nullptr;
  PgEngineSetup child = s_;
  child.prefix = c10::str(s_.prefix, "s", n, "c", color, "/");
  return make_pg_engine(child, m.rank, static_cast<int>(m.members.size()));
}

std::unique_ptr<InterNodeEngine> PgEngine::shrink(const std::vector<int>& excluded) {
  int below = 0;
  for (int e : excluded) below += e < rank();
  PgEngineSetup child = s_;
  child.prefix = c10::str(s_.prefix, "k", shrinks_++, "/");
  return make_pg_engine(child, rank() - below, size() - static_cast<int>(excluded.size()));
}

}  // namespace

std::unique_ptr<InterNodeEngine> make_pg_engine(const PgEngineSetup& setup, int rank, int size) {
  if (!setup.make_backend)
    throw UnsupportedError("torch engine: peerlink.torch passed no backend maker for the ranks between nodes");
  auto store = c10::make_intrusive<c10d::PrefixStore>(setup.prefix + "pg/", setup.store);
  c10::intrusive_ptr<c10d::Backend> pg = setup.make_backend(store, rank, size, setup.device.is_cpu() ? "cpu" : "cuda");
  if (!pg) throw UnsupportedError("torch engine: the backend maker returned nothing");
  auto engine = std::make_unique<PgEngine>(setup, std::move(pg));
  // One collective of every member now: ProcessGroupNCCL then has its communicator, so a later
  // send/recv between two members needs no other member (torch documents that a group's first
  // batched send/recv must include every rank).
  int32_t probe = 1;
  at::Tensor t = at::full({1}, probe, at::TensorOptions().dtype(at::kInt).device(setup.device));
  engine->allreduce(t.data_ptr(), t.data_ptr(), 1, DataType::I32, ReduceOp::Sum, nullptr);
  return engine;
}

}  // namespace peerlink::pt
