// The public Communicator: a thin forwarder to CommImpl.
#include "peerlink/communicator.h"

#include "bootstrap/host_identity.h"
#include "common/format.h"
#include "peerlink/errors.h"
#include "transport/comm_impl.h"

namespace peerlink {
namespace {

// A Communicator is one node's (its ranks meet through this machine's shared memory). An id from
// make_unique_id names the node it was made on, so a rank elsewhere fails here at once instead of
// waiting out the rendezvous; a rendezvous that times out says what a missing rank may mean.
std::unique_ptr<detail::CommImpl> make_impl(std::string unique_id, int rank, int world_size, int device,
                                            Options opts) {
  uint64_t maker = 0;
  std::string maker_name;
  if (bootstrap::parse_node_unique_id(unique_id, &maker, &maker_name)) {
    bootstrap::HostIdentity me = bootstrap::host_identity(opts.host_id);
    if (me.node != maker)
      throw InvalidArgument(common::format(
          "Communicator: rank {} runs on host '{}' (node {:016x}) but the unique id '{}' was made on host '{}' "
          "(node {:016x}): a Communicator's ranks share one node (across nodes use libnccl.so.2 or "
          "peerlink::HierCommunicator, docs/multi-node.md)",
          rank, me.name, me.node, unique_id, maker_name, maker));
  }
  try {
    return std::make_unique<detail::CommImpl>(std::move(unique_id), rank, world_size, device, std::move(opts));
  } catch (const TimeoutError& e) {
    throw TimeoutError(common::format(
        "{} (a Communicator spans one node: ranks on other hosts cannot join it; across nodes use "
        "libnccl.so.2 or peerlink::HierCommunicator, docs/multi-node.md)",
        e.what()));
  }
}

}  // namespace

std::string make_unique_id(const Options& opts) {
  return bootstrap::make_node_unique_id(bootstrap::host_identity(opts.host_id));
}

Communicator::Communicator(std::string unique_id, int rank, int world_size, int device, Options opts)
    : impl_(make_impl(std::move(unique_id), rank, world_size, device, std::move(opts))) {}
Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->rank(); }
int Communicator::world_size() const { return impl_->world_size(); }
int Communicator::device() const { return impl_->device(); }
const Options& Communicator::options() const { return impl_->options(); }
const std::string& Communicator::unique_id() const { return impl_->unique_id(); }
void* Communicator::alloc(size_t bytes) { return impl_->alloc(bytes); }
void Communicator::free(void* p) { impl_->free(p); }
void Communicator::notify_ipc_buffer(int peer, uint32_t buf_id, void* ptr, size_t len, uint64_t version) {
  impl_->notify_ipc_buffer(peer, buf_id, ptr, len, version);
}
void Communicator::wait_ipc_buffer(int peer, uint32_t buf_id, uint64_t min_version) {
  impl_->wait_ipc_buffer(peer, buf_id, min_version);
}
Request Communicator::isend(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset, uint64_t version) {
  return impl_->isend(peer, src, len, buf_id, offset, version);
}
void Communicator::send_direct(int peer, const void* src, size_t len, uint32_t buf_id, uint64_t version,
                               size_t offset) {
  impl_->send_direct(peer, src, len, buf_id, version, offset, options().timeout);
}
void Communicator::send_direct(int peer, const void* src, size_t len, uint32_t buf_id, uint64_t version,
                               size_t offset, std::chrono::milliseconds timeout) {
  impl_->send_direct(peer, src, len, buf_id, version, offset, timeout);
}
Request Communicator::irecv(int peer, uint32_t buf_id, size_t offset, size_t len) {
  return impl_->irecv(peer, buf_id, offset, len);
}
void Communicator::barrier() { impl_->barrier(); }
void Communicator::allgather_bytes(const void* mine, size_t bytes, void* all) { impl_->allgather(mine, bytes, all); }
void Communicator::close() { impl_->close(); }
bool Communicator::closed() const { return impl_->closed(); }
Path Communicator::path_to(int peer) const { return impl_->path_to(peer); }
Completion Communicator::completion_with(int peer) const { return impl_->completion_with(peer); }
bool Communicator::shares_process(int peer) const { return impl_->shares_process(peer); }
CommStats Communicator::stats() const { return impl_->stats(); }

namespace detail {
// Not exported (mk/libpeerlink.map): only the library's own upper layers reach the transport.
CommServices& services(Communicator& comm) { return *comm.impl_; }
}  // namespace detail

}  // namespace peerlink
