// A process group spanning nodes (group_comm.h): a HierCommunicator whose node map is the one the
// group learnt at creation, whose ranks agree through the group's store, and whose engines between
// nodes are torch backends (pg_engine.h).
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <cstdint>

#include "group_comm.h"
#include "peerlink/errors.h"
#include "peerlink/multinode.h"
#include "pg_engine.h"

namespace peerlink::pt {
namespace {

// FNV-1a of a host identity: the same number on every rank (std::hash need not be).
uint64_t host_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

class StoreMeeting final : public Meeting {
 public:
  StoreMeeting(const HierGroupSetup& s) : s_(s) {}

  peerlink::NodeMap meet() override {
    std::vector<uint64_t> hosts;
    for (int node : s_.nodes.node_of_rank) hosts.push_back(host_hash(s_.nodes.hosts[node]));
    return peerlink::NodeMap(std::move(hosts), s_.nodes.hosts);
  }

  std::vector<std::string> agree(const std::string& my_error) override {
    const std::string base = c10::str(s_.prefix, "agree", rounds_++, "/");
    s_.store->set(c10::str(base, s_.rank), std::vector<uint8_t>(my_error.begin(), my_error.end()));
    std::vector<std::string> failed;
    for (int q = 0; q < s_.size; ++q) {
      std::vector<uint8_t> v = s_.store->get(c10::str(base, q));
      if (!v.empty())
        failed.push_back(c10::str("rank ", q, " (", s_.nodes.hosts[s_.nodes.node_of_rank[q]], "): ",
                                  std::string(v.begin(), v.end())));
    }
    return failed;
  }

 private:
  const HierGroupSetup& s_;
  int rounds_ = 0;
};

class HierGroupComm final : public GroupComm {
 public:
  HierGroupComm(std::unique_ptr<HierCommunicator> h, c10::intrusive_ptr<c10d::Store> store, std::string prefix)
      : h_(std::move(h)), store_(std::move(store)), prefix_(std::move(prefix)), rank_(h_->rank()), size_(h_->nranks()) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op, void* stream) override {
    hier().allreduce(send, recv, count, dt, op, stream);
  }
  void reduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op, int root, void* stream) override {
    hier().reduce(send, recv, count, dt, op, root, stream);
  }
  void reduce_scatter(const void* send, void* recv, size_t recvcount, DataType dt, ReduceOp op,
                      void* stream) override {
    hier().reduce_scatter(send, recv, recvcount, dt, op, stream);
  }
  void all_gather(const void* send, void* recv, size_t count, DataType dt, void* stream) override {
    hier().all_gather(send, recv, count * dtype_size(dt), stream);
  }
  void broadcast(void* buf, size_t count, DataType dt, int root, void* stream) override {
    hier().broadcast(buf, buf, count * dtype_size(dt), root, stream);
  }
  void all_to_all(const void* send, void* recv, size_t count_per_peer, DataType dt, void* stream) override {
    hier().all_to_all(send, recv, count_per_peer * dtype_size(dt), stream);
  }
  void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                    const size_t* recv_counts, const size_t* recv_displs, DataType dt, void* stream) override;
  void group_start() override { hier().group_start(); }
  void group_end() override { hier().group_end(); }
  void send(int peer, const void* buf, size_t bytes, void* stream) override { hier().send(peer, buf, bytes, stream); }
  void recv(int peer, void* buf, size_t bytes, void* stream) override { hier().recv(peer, buf, bytes, stream); }
  void barrier() override;
  void check_errors(bool, bool) override {
    if (h_) h_->check_async_error();  // closed: nothing can be pending
  }
  void close() override { h_.reset(); }
  Communicator* single_node() override { return nullptr; }

 private:
  HierCommunicator& hier() {
    if (!h_) throw InvalidArgument("this process group's communicator was closed");
    return *h_;
  }
  std::unique_ptr<HierCommunicator> h_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
  int rank_, size_;
  int barriers_ = 0;
};

// One group of send/recv per peer (any sizes; this rank's own block is a copy inside the group).
void HierGroupComm::all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                                 const size_t* recv_counts, const size_t* recv_displs, DataType dt, void* stream) {
  HierCommunicator& h = hier();
  const size_t es = dtype_size(dt);
  h.group_start();
  try {
    for (int q = 0; q < size_; ++q) {
      if (send_counts[q] == 0 && recv_counts[q] == 0) continue;
      if (send_counts[q]) h.send(q, static_cast<const char*>(send) + send_displs[q] * es, send_counts[q] * es, stream);
      if (recv_counts[q]) h.recv(q, static_cast<char*>(recv) + recv_displs[q] * es, recv_counts[q] * es, stream);
    }
  } catch (...) {
    h.group_end();  // what was queued still meets its peers
    throw;
  }
  h.group_end();
}

// Through the store: every rank counts itself in, the last one opens the barrier (bounded by the
// store's timeout, which names the key it waited for).
void HierGroupComm::barrier() {
  hier();
  const std::string key = c10::str(prefix_, "barrier", barriers_++);
  if (store_->add(key, 1) == size_) store_->set(key + "/open", std::vector<uint8_t>{1});
  store_->wait({key + "/open"});
}

}  // namespace

std::unique_ptr<GroupComm> make_hier_group_comm(HierGroupSetup setup) {
  HierSetup hs;
  hs.rank = setup.rank;
  hs.nranks = setup.size;
  hs.device = setup.device.is_cpu() ? kHostDevice : setup.device.index();
  hs.job_id = setup.job_id;
  hs.opts = setup.opts;
  StoreMeeting meeting(setup);
  hs.map = meeting.meet();
  // The engines reach the maker (a Python callable) through a slot emptied once the communicator
  // exists: nothing made later holds a Python object, which must not outlive the interpreter.
  auto slot = std::make_shared<BackendMaker>(setup.make_backend);
  BackendMaker through_slot = [slot](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                     const std::string& device) -> c10::intrusive_ptr<c10d::Backend> {
    if (!*slot) throw UnsupportedError("torch engine: backends between nodes are made only while the group forms");
    return (*slot)(store, rank, size, device);
  };
  PgEngineSetup es{setup.store, setup.prefix + "engine/", setup.device, through_slot};
  EngineFactory factory;
  factory.prepare = [&setup]() -> std::string {
    return setup.make_backend ? "" : "peerlink.torch passed no backend maker for the ranks between nodes";
  };
  factory.create = [&es, &setup] { return make_pg_engine(es, setup.rank, setup.size); };
  std::unique_ptr<HierCommunicator> h;
  try {
    h = HierCommunicator::create(std::move(hs), meeting, factory);
  } catch (...) {
    *slot = nullptr;
    throw;
  }
  *slot = nullptr;
  return std::make_unique<HierGroupComm>(std::move(h), setup.store, setup.prefix);
}

}  // namespace peerlink::pt
