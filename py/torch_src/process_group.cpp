#include "process_group.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>

#include <optional>
#include <random>

#include <unistd.h>

#include "errors.h"
#include "peerlink/device.h"
#include "pg_checks.h"
#include "work.h"

namespace peerlink::pt {

namespace {

std::string random_unique_id(const std::string& prefix) {
  std::random_device rd;
  uint64_t v = (uint64_t(rd()) << 32) ^ rd() ^ (uint64_t(::getpid()) << 16);
  char buf[24];
  std::snprintf(buf, sizeof buf, "-%016llx", static_cast<unsigned long long>(v));
  return prefix + buf;
}

}  // namespace

ProcessGroupPeerlink::ProcessGroupPeerlink(c10::intrusive_ptr<c10d::Store> store, int rank, int size, Config cfg)
    : Backend(rank, size), store_(std::move(store)), cfg_(std::move(cfg)) {
  // A store that outlives a destroyed group (torchrun's agent store, a reused file) still holds the
  // keys of the group's previous incarnation under the same names: every incarnation counts its
  // ranks in, and its keys carry the count.
  const int64_t joined = store_->add("peerlink/joined", 1);
  prefix_ = c10::str("peerlink/", (joined - 1) / size, "/");
  nodes_ = exchange_node_map(*store_, prefix_ + "host/", rank, size, cfg_.host_id);
  // A group spanning nodes runs peerlink inside each node and torch backends between them, made
  // by the maker peerlink.torch passes (ProcessGroupNCCL for CUDA tensors, gloo for CPU tensors).
  TORCH_CHECK_NOT_IMPLEMENTED(nodes_.nodes() == 1 || cfg_.make_backend, "peerlink: process group '", cfg_.group_name,
                              "' spans ", nodes_.nodes(), " nodes (", nodes_.describe(),
                              ") and was created without a backend for the ranks between nodes (create it through "
                              "torch.distributed with peerlink.torch imported)");
  init();
}

ProcessGroupPeerlink::~ProcessGroupPeerlink() = default;

std::unique_ptr<GroupComm> ProcessGroupPeerlink::make_communicator(const at::Device& device, int index) {
  const std::string key = prefix_ + (device.is_cpu() ? "uid/host" : "uid/cuda");
  std::string uid;
  if (getRank() == 0) {
    uid = random_unique_id(cfg_.uid_prefix);
    store_->set(key, uid);
  } else {
    uid = store_->get_to_str(key);
  }
  peerlink::Options opts = peerlink::Options::from_env();
  opts.timeout = cfg_.timeout;
  std::optional<c10::DeviceGuard> guard;
  if (!device.is_cpu()) guard.emplace(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index)));
  // A first call inside a graph capture (global mode) may set up here: allocations are legal then.
  device::RelaxedCaptureScope relaxed;
  if (nodes_.nodes() == 1)
    return make_node_group_comm(std::make_unique<Communicator>(uid, getRank(), getSize(), index, opts));
  HierGroupSetup hs;
  hs.store = store_;
  hs.prefix = c10::str(prefix_, device.is_cpu() ? "hier/host/" : "hier/cuda/");
  hs.job_id = uid;
  hs.rank = getRank();
  hs.size = getSize();
  hs.device = device.is_cpu() ? c10::Device(c10::DeviceType::CPU)
                              : c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
  hs.nodes = nodes_;
  hs.opts = opts;
  hs.make_backend = cfg_.make_backend;
  return make_hier_group_comm(std::move(hs));
}

std::shared_ptr<DeviceComm> ProcessGroupPeerlink::comm_for(const at::Device& device, const char* what) {
  TORCH_CHECK_VALUE(device.is_cpu() || device.is_cuda(), "peerlink ", what, ": tensors on ", device,
                    " (peerlink runs CUDA and CPU tensors)");
  const int index = device.is_cpu() ? kHostDevice : device.has_index() ? device.index() : cuda_impl().getDevice().index();
  std::lock_guard<std::mutex> g(mu_);
  TORCH_CHECK_VALUE(!shut_down_, "peerlink ", what, ": process group '", cfg_.group_name, "' was shut down");
  auto it = comms_.find(index);
  if (it != comms_.end()) return it->second;
  for (const auto& kv : comms_)
    TORCH_CHECK_VALUE(kv.first == kHostDevice || device.is_cpu(), "peerlink ", what, ": this rank's communicator of group '",
                      cfg_.group_name, "' is on cuda:", kv.first, ", the call's tensors are on cuda:", index,
                      " (one CUDA device per rank and group, as with NCCL)");
  c10::Device d = device.is_cpu() ? c10::Device(c10::DeviceType::CPU)
                                  : c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
  auto dc = std::make_shared<DeviceComm>(make_communicator(device, index), d);
  comms_[index] = dc;
  return dc;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPeerlink::run(const char* what, c10d::OpType type, const at::Device& device,
                                                         bool async, std::vector<at::Tensor> outputs,
                                                         std::vector<at::Tensor> keep, const Body& body) {
  return translate_errors(what, [&]() -> c10::intrusive_ptr<c10d::Work> {
    std::shared_ptr<DeviceComm> dc = comm_for(device, what);
    bool coalescing;
    {
      std::lock_guard<std::mutex> g(mu_);
      coalescing = coalescing_;
      ++seq_;
    }
    // Inside a coalescing block every call goes to the internal stream, so the block's Work
    // (endCoalescing: the last call's) follows all of them.
    if (coalescing) async = true;
    c10::intrusive_ptr<c10d::Work> work;
    {
      std::lock_guard<std::mutex> g(dc->mutex());
      Launch l = dc->begin(async);
      {
        std::optional<c10::StreamGuard> on_stream;
        if (l.stream) on_stream.emplace(*l.stream);
        body(l);
      }
      dc->end(l);
      if (dc->is_host()) {
        work = c10::make_intrusive<WorkPeerlink>(getRank(), type, std::move(outputs));
      } else {
        if (async) {
          record_on_stream(keep, *l.stream);
          record_on_stream(outputs, *l.stream);
        }
        work = c10::make_intrusive<WorkPeerlink>(getRank(), type, dc, l, std::move(outputs), std::move(keep));
      }
    }
    if (coalescing) {
      std::lock_guard<std::mutex> g(mu_);
      coalesced_.push_back(work);
    }
    return work;
  });
}

void ProcessGroupPeerlink::run_sync(const char* what, const at::Device& device, const Body& body) {
  translate_errors(what, [&] {
    std::shared_ptr<DeviceComm> dc = comm_for(device, what);
    std::lock_guard<std::mutex> g(dc->mutex());
    Launch l = dc->begin(false);
    body(l);
    dc->end(l);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPeerlink::p2p(const char* what, bool is_send, at::Tensor& t, int peer) {
  check_tensor(t, what);
  check_rank(peer, getSize(), what, is_send ? "destination" : "source");
  {
    std::lock_guard<std::mutex> g(mu_);
    if (coalescing_) {  // issued with the rest of the block by endCoalescing
      pending_p2p_.emplace_back(P2PItem{is_send, peer, nullptr, 0}, t);
      return c10::make_intrusive<WorkPeerlink>(getRank(), c10d::OpType::COALESCED, std::vector<at::Tensor>{});
    }
  }
  const auto type = is_send ? c10d::OpType::SEND : c10d::OpType::RECV;
  return run(what, type, t.device(), /*async=*/true, {t}, {t}, [t, peer, is_send](const Launch& l) {
    Writable w(t);
    p2p_group(l, {is_send ? p2p_send(peer, w.c) : p2p_recv(peer, w.c)});
    if (!is_send) w.done();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPeerlink::send(std::vector<at::Tensor>& tensors, int dst, int /*tag*/) {
  at::Tensor t = single_tensor(tensors, "send");
  return p2p("send", true, t, dst);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPeerlink::recv(std::vector<at::Tensor>& tensors, int src, int /*tag*/) {
  at::Tensor t = single_tensor(tensors, "recv");
  return p2p("recv", false, t, src);
}

void ProcessGroupPeerlink::startCoalescing() {
  std::lock_guard<std::mutex> g(mu_);
  // A block left by an exception (its endCoalescing never came) is dropped: its sends and
  // receives were never issued.
  coalescing_ = true;
  coalesced_.clear();
  pending_p2p_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPeerlink::endCoalescing() {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<std::pair<P2PItem, at::Tensor>> p2ps;
  {
    std::lock_guard<std::mutex> g(mu_);
    TORCH_CHECK_VALUE(coalescing_, "peerlink: endCoalescing without startCoalescing");
    coalescing_ = false;
    works.swap(coalesced_);
    p2ps.swap(pending_p2p_);
  }
  if (!p2ps.empty()) {
    std::vector<at::Tensor> tensors;
    for (auto& p : p2ps) tensors.push_back(p.second);
    works.push_back(run("batch_isend_irecv", c10d::OpType::COALESCED, tensors[0].device(), true, tensors, tensors,
                        [&p2ps](const Launch& l) {
                          std::vector<Writable> dense;
                          dense.reserve(p2ps.size());
                          std::vector<P2PItem> items;
                          for (auto& p : p2ps) {
                            dense.emplace_back(p.second);
                            items.push_back(p.first.send ? p2p_send(p.first.peer, dense.back().c)
                                                         : p2p_recv(p.first.peer, dense.back().c));
                          }
                          p2p_group(l, items);
                          for (size_t i = 0; i < p2ps.size(); ++i)
                            if (!p2ps[i].first.send) dense[i].done();
                        }));
  }
  // Every call of the block ran in order on one stream: the last one's Work follows them all.
  if (works.empty()) return c10::make_intrusive<WorkPeerlink>(getRank(), c10d::OpType::COALESCED, std::vector<at::Tensor>{});
  return works.back();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPeerlink::barrier(const c10d::BarrierOptions& opts) {
  at::Device device(c10::DeviceType::CPU);
  if (opts.device) device = *opts.device;
  else if (!opts.device_ids.empty()) device = at::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(opts.device_ids[0]));
  return translate_errors("barrier", [&]() -> c10::intrusive_ptr<c10d::Work> {
    std::shared_ptr<DeviceComm> dc = comm_for(device, "barrier");
    // As NCCL's barrier: returns once every rank's work queued before it has run.
    dc->synchronize_streams();
    dc->check_errors("barrier");
    dc->comm().barrier();
    return c10::make_intrusive<WorkPeerlink>(getRank(), c10d::OpType::BARRIER, std::vector<at::Tensor>{});
  });
}

void ProcessGroupPeerlink::setTimeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> g(mu_);
  cfg_.timeout = timeout;  // communicators created from now on; existing ones keep theirs
}

void ProcessGroupPeerlink::eagerConnectSingleDevice(at::Device device) { comm_for(device, "connect"); }

void ProcessGroupPeerlink::close_all(bool drain) {
  std::map<int, std::shared_ptr<DeviceComm>> comms;
  {
    std::lock_guard<std::mutex> g(mu_);
    shut_down_ = true;
    comms.swap(comms_);
  }
  for (auto& kv : comms) kv.second->close(drain);
}

void ProcessGroupPeerlink::shutdown() { close_all(/*drain=*/true); }

void ProcessGroupPeerlink::abort() { close_all(/*drain=*/false); }

}  // namespace peerlink::pt
