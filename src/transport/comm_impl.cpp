// CommImpl: argument validation and the state checks every call makes, then the transport.
#include "transport/comm_impl.h"

#include "common/log.h"
#include "gpu/runtime.h"
#include "peerlink/errors.h"
#include "transport/transport.h"

namespace peerlink::detail {

using common::cat;

CommImpl::CommImpl(std::string unique_id, int rank, int world_size, int device, Options opts)
    : unique_id_(std::move(unique_id)), rank_(rank), world_size_(world_size), device_(device), opts_(std::move(opts)) {
  if (unique_id_.empty()) throw InvalidArgument("Communicator: unique_id is empty");
  if (world_size_ < 1 || world_size_ > bootstrap::kMaxRanks)
    throw InvalidArgument(cat("Communicator: world_size ", world_size_, " is outside [1, ", bootstrap::kMaxRanks, "]"));
  if (rank_ < 0 || rank_ >= world_size_)
    throw InvalidArgument(cat("Communicator: rank ", rank_, " is outside [0, ", world_size_, ")"));
  if (device_ < kHostDevice)
    throw InvalidArgument(cat("Communicator: device ", device_, " is invalid (use -1 for host memory or a GPU index)"));
  if (device_ >= 0) {
    int n = gpu::device_count();
    if (device_ >= n)
      throw InvalidArgument(cat("Communicator: device ", device_, " does not exist (", gpu::runtime_name(), " sees ", n,
                                " GPU(s))"));
  }
  if (opts_.timeout.count() <= 0) throw InvalidArgument(cat("Options::timeout must be > 0 ms"));
  if (opts_.relay_slots < 2 || opts_.relay_slots > 64)
    throw InvalidArgument(cat("Options::relay_slots ", opts_.relay_slots, " is outside [2, 64]"));
  if (opts_.relay_chunk_bytes < 4096)
    throw InvalidArgument(cat("Options::relay_chunk_bytes ", opts_.relay_chunk_bytes, " is below 4096"));
  transport_ = std::make_unique<Transport>(unique_id_, rank_, world_size_, device_, opts_);
}

CommImpl::~CommImpl() {
  try {
    close();
  } catch (...) {
  }
}

const std::string& CommImpl::shm_prefix() const { return transport_->boot().job_prefix(); }

void CommImpl::check_open() {
  if (closed()) throw InvalidArgument(cat("communicator (rank ", rank_, " of '", unique_id_, "') is closed"));
  transport_->rethrow_worker_error();
}

void CommImpl::check_usable() {
  check_open();
  // Collectives stop here (upper layers call this first): the ranks disagree on how many
  // barriers or steps ran, so going on would pair this rank with the wrong ones.
  if (transport_->boot().interrupted())
    throw Error(cat("communicator (rank ", rank_, " of '", unique_id_, "'): an earlier barrier or collective was ",
                    "interrupted, so its ranks no longer agree on how many ran; close the communicator"));
}

void CommImpl::validate_peer(int peer, const char* what) const {
  if (closed()) throw InvalidArgument(cat(what, ": communicator (rank ", rank_, ") is closed"));
  if (peer < 0 || peer >= world_size_)
    throw InvalidArgument(cat(what, ": peer ", peer, " is outside [0, ", world_size_, ")"));
  if (peer == rank_) throw InvalidArgument(cat(what, ": peer ", peer, " is this rank itself"));
}

void CommImpl::check_peer_alive(int peer) {
  validate_peer(peer, "check_peer_alive");
  transport_->check_peer(peer);
}

void CommImpl::check_interrupt() { transport_->boot().check_interrupt(); }

gpu::Backend& CommImpl::backend() {
  check_open();
  return transport_->backend();
}

void CommImpl::allgather(const void* mine, size_t bytes, void* all) {
  check_usable();
  transport_->boot().allgather(mine, bytes, all, opts_.timeout);
}

void CommImpl::barrier() {
  check_usable();
  transport_->boot().barrier(opts_.timeout);
}

gpu::MemHandle CommImpl::export_memory(const void* p, size_t len, size_t* offset) {
  check_open();
  uint64_t off = 0;
  gpu::MemHandle h = transport_->ipc().export_range(p, len, &off);
  *offset = static_cast<size_t>(off);
  return h;
}

void* CommImpl::open_peer_memory(int peer, const gpu::MemHandle& h) {
  validate_peer(peer, "open_peer_memory");
  return transport_->ipc().acquire(peer, h);
}

void CommImpl::release_peer_memory(int peer, const gpu::MemHandle& h) {
  if (closed()) return;
  transport_->ipc().release(peer, h);
}

std::shared_ptr<void>& CommImpl::upper_state(const std::string& key) {
  std::lock_guard<std::mutex> g(upper_mu_);
  return upper_[key];
}

void* CommImpl::alloc(size_t bytes) {
  check_open();
  return transport_->backend().alloc(bytes);
}

void CommImpl::free(void* p) {
  check_open();
  if (!p) throw InvalidArgument("free: pointer is null");
  transport_->free_memory(p);  // revokes its publications first
}

void CommImpl::notify_ipc_buffer(int peer, uint32_t buf_id, void* ptr, size_t len, uint64_t version) {
  validate_peer(peer, "notify_ipc_buffer");
  transport_->notify(peer, buf_id, ptr, len, version);
}

void CommImpl::wait_ipc_buffer(int peer, uint32_t buf_id, uint64_t min_version) {
  validate_peer(peer, "wait_ipc_buffer");
  transport_->wait_buffer(peer, buf_id, min_version);
}

Request CommImpl::isend(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset, uint64_t version) {
  validate_peer(peer, "isend");
  return transport_->isend(peer, src, len, buf_id, offset, version);
}

void CommImpl::send_direct(int peer, const void* src, size_t len, uint32_t buf_id, uint64_t version, size_t offset) {
  validate_peer(peer, "isend");
  transport_->send_direct(peer, src, len, buf_id, version, offset);
}

Request CommImpl::irecv(int peer, uint32_t buf_id, size_t offset, size_t len) {
  validate_peer(peer, "irecv");
  return transport_->irecv(peer, buf_id, offset, len);
}

void CommImpl::close() {
  bool expected = false;
  if (!closed_.compare_exchange_strong(expected, true)) return;
  {
    // Upper layers first: they hold mappings and memory of the transport.
    std::lock_guard<std::mutex> g(upper_mu_);
    upper_.clear();
  }
  if (transport_) transport_->shutdown();
  transport_.reset();
}

Path CommImpl::path_to(int peer) const {
  validate_peer(peer, "path_to");
  return transport_->peer(peer).path;
}

Completion CommImpl::completion_with(int peer) const {
  validate_peer(peer, "completion_with");
  return transport_->peer(peer).completion;
}

CommStats CommImpl::stats() const {
  CommStats s;
  if (!transport_) return s;
  auto& c = transport_->ipc().counters();
  s.exports = c.exports.load();
  s.opens = c.opens.load();
  s.closes = c.closes.load();
  s.sends_done_seq = transport_->sends_done_seq.load();
  s.sends_ring = transport_->sends_ring.load();
  s.sends_relay = transport_->sends_relay.load();
  return s;
}

}  // namespace peerlink::detail
