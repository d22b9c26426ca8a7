// CommImpl: argument validation, the closed/in-flight rule, then the transport.
#include "transport/comm_impl.h"

#include <chrono>
#include <thread>

#include "common/format.h"
#include "common/log.h"
#include "gpu/runtime.h"
#include "peerlink/errors.h"
#include "transport/transport.h"

namespace peerlink::detail {

class CommImpl::Scope {
 public:
  Scope(const CommImpl& c, const char* what) : c_(c) { c_.enter(what); }
  ~Scope() { c_.leave(); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const CommImpl& c_;
};

CommImpl::CommImpl(std::string unique_id, int rank, int world_size, int device, Options opts)
    : unique_id_(std::move(unique_id)), rank_(rank), world_size_(world_size), device_(device), opts_(std::move(opts)) {
  if (unique_id_.empty()) throw InvalidArgument("Communicator: unique_id is empty");
  if (world_size_ < 1 || world_size_ > bootstrap::kMaxRanks)
    throw InvalidArgument(
        common::format("Communicator: world_size {} is outside [1, {}]", world_size_, bootstrap::kMaxRanks));
  if (rank_ < 0 || rank_ >= world_size_)
    throw InvalidArgument(common::format("Communicator: rank {} is outside [0, {})", rank_, world_size_));
  if (device_ < kHostDevice)
    throw InvalidArgument(
        common::format("Communicator: device {} is invalid (use -1 for host memory or a GPU index)", device_));
  if (device_ >= 0) {
    int n = gpu::device_count();
    if (device_ >= n)
      throw InvalidArgument(common::format("Communicator: device {} does not exist ({} sees {} GPU(s))", device_,
                                           gpu::runtime_name(), n));
  }
  opts_.validate();  // the one check of every knob (config/options.cpp)
  // Every blocking wait below runs this hook (~every 20 ms): close() on another thread makes it
  // throw, so the wait returns and close() can go on. The caller's own hook runs after it.
  Options topts = opts_;
  topts.interrupt_check = [this, user = opts_.interrupt_check] {
    if (closed_.load(std::memory_order_seq_cst)) throw_closed("wait");
    if (user) user();
  };
  transport_ = std::make_unique<Transport>(unique_id_, rank_, world_size_, device_, topts);
}

CommImpl::~CommImpl() {
  try {
    close();
  } catch (...) {
  }
}

void CommImpl::throw_closed(const char* what) const {
  throw InvalidArgument(common::format("{}: communicator (rank {} of '{}') is closed", what, rank_, unique_id_));
}

void CommImpl::enter(const char* what) const {
  in_flight_.fetch_add(1, std::memory_order_seq_cst);
  if (closed_.load(std::memory_order_seq_cst)) {
    leave();
    throw_closed(what);
  }
}

void CommImpl::leave() const noexcept { in_flight_.fetch_sub(1, std::memory_order_seq_cst); }

void CommImpl::check_open(const char* what) {
  if (closed()) throw_closed(what);
  transport_->rethrow_worker_error();
}

void CommImpl::check_usable() {
  Scope s(*this, "collective");
  check_open("collective");
  // Collectives stop here (upper layers call this first): the ranks disagree on how many
  // barriers or steps ran, so going on would pair this rank with the wrong ones.
  // The reason is bootstrap's: a barrier that timed out or lost a peer is not "interrupted".
  if (transport_->boot().interrupted())
    throw Error(
        common::format("communicator (rank {} of '{}'): an earlier barrier or collective wait {}, so its ranks no "
                       "longer agree on how many ran; close the communicator",
                       rank_, unique_id_, transport_->boot().out_of_step_reason()));
}

void CommImpl::validate_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= world_size_)
    throw InvalidArgument(common::format("{}: peer {} is outside [0, {})", what, peer, world_size_));
  if (peer == rank_) throw InvalidArgument(common::format("{}: peer {} is this rank itself", what, peer));
}

void CommImpl::check_peer_alive(int peer) {
  Scope s(*this, "check_peer_alive");
  validate_peer(peer, "check_peer_alive");
  transport_->check_peer(peer);
}

void CommImpl::check_interrupt() {
  Scope s(*this, "collective");
  transport_->boot().check_interrupt();
}

gpu::Backend& CommImpl::backend() {
  // The reference outlives this scope: callers are inside a CommServices::Call (collectives) or
  // an upper-state destructor run by close() itself (which frees its memory through it).
  if (in_upper_teardown()) return transport_->backend();
  Scope s(*this, "backend");
  check_open("backend");
  return transport_->backend();
}

void CommImpl::allgather(const void* mine, size_t bytes, void* all) {
  Scope s(*this, "allgather");
  check_usable();
  if (bytes > Communicator::kMaxAllgatherBytes)
    throw InvalidArgument(common::format("allgather: {} bytes exceeds {}", bytes, Communicator::kMaxAllgatherBytes));
  if (bytes > 0 && (!mine || !all)) throw InvalidArgument("allgather: null buffer");
  transport_->boot().allgather(mine, bytes, all, opts_.timeout);
}

void CommImpl::barrier() {
  Scope s(*this, "barrier");
  check_usable();
  transport_->boot().barrier(opts_.timeout);
}

gpu::MemHandle CommImpl::export_memory(const void* p, size_t len, size_t* offset) {
  Scope s(*this, "export_memory");
  check_open("export_memory");
  uint64_t off = 0;
  gpu::MemHandle h = transport_->ipc().export_range(p, len, &off);
  *offset = static_cast<size_t>(off);
  return h;
}

void* CommImpl::open_peer_memory(int peer, const gpu::MemHandle& h) {
  Scope s(*this, "open_peer_memory");
  validate_peer(peer, "open_peer_memory");
  return transport_->ipc().acquire(peer, h);
}

void CommImpl::release_peer_memory(int peer, const gpu::MemHandle& h) {
  if (in_upper_teardown()) {  // close() destroying upper state: release now, in order
    transport_->ipc().release(peer, h);
    return;
  }
  // After close the transport closes every mapping itself.
  if (closed()) return;
  Scope s(*this, "release_peer_memory");
  transport_->ipc().release(peer, h);
}

std::shared_ptr<UpperState> CommImpl::find_state_locked(std::type_index type) const {
  for (const auto& kv : upper_)
    if (kv.first == type) return kv.second;
  return nullptr;
}

std::shared_ptr<UpperState> CommImpl::find_state(std::type_index type) {
  Scope s(*this, "upper_state");
  std::lock_guard<std::mutex> g(upper_mu_);
  return find_state_locked(type);
}

std::shared_ptr<UpperState> CommImpl::find_or_create_state(std::type_index type,
                                                          const std::function<std::shared_ptr<UpperState>()>& make) {
  Scope s(*this, "upper_state");
  {
    std::lock_guard<std::mutex> g(upper_mu_);
    if (auto found = find_state_locked(type)) return found;
  }
  std::lock_guard<std::recursive_mutex> setup(setup_mu_);
  {
    std::lock_guard<std::mutex> g(upper_mu_);  // made by another thread while this one waited?
    if (auto found = find_state_locked(type)) return found;
  }
  std::shared_ptr<UpperState> made = make();  // may be collective; a throw stores nothing
  std::lock_guard<std::mutex> g(upper_mu_);
  upper_.emplace_back(type, made);
  return made;
}

void CommImpl::destroy_upper_states() {
  // Upper layers first: they hold mappings and memory of the transport, and free them through
  // backend() / release_peer_memory(), which let this thread through (in_upper_teardown). Newest
  // first: a state may use one made before it.
  std::vector<std::pair<std::type_index, std::shared_ptr<UpperState>>> upper;
  {
    std::lock_guard<std::mutex> g(upper_mu_);
    upper.swap(upper_);
  }
  upper_teardown_.store(std::this_thread::get_id(), std::memory_order_release);
  while (!upper.empty()) upper.pop_back();
  upper_teardown_.store(std::thread::id(), std::memory_order_release);
}

void* CommImpl::alloc(size_t bytes) {
  Scope s(*this, "alloc");
  check_open("alloc");
  return transport_->backend().alloc(bytes);
}

void CommImpl::free(void* p) {
  Scope s(*this, "free");
  check_open("free");
  if (!p) throw InvalidArgument("free: pointer is null");
  transport_->free_memory(p);  // revokes its publications first
}

void CommImpl::notify_ipc_buffer(int peer, uint32_t buf_id, void* ptr, size_t len, uint64_t version) {
  Scope s(*this, "notify_ipc_buffer");
  validate_peer(peer, "notify_ipc_buffer");
  transport_->notify(peer, buf_id, ptr, len, version);
}

void CommImpl::wait_ipc_buffer(int peer, uint32_t buf_id, uint64_t min_version) {
  Scope s(*this, "wait_ipc_buffer");
  validate_peer(peer, "wait_ipc_buffer");
  transport_->wait_buffer(peer, buf_id, min_version);
}

Request CommImpl::isend(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset, uint64_t version) {
  Scope s(*this, "isend");
  validate_peer(peer, "isend");
  return transport_->isend(peer, src, len, buf_id, offset, version);
}

void CommImpl::send_direct(int peer, const void* src, size_t len, uint32_t buf_id, uint64_t version, size_t offset,
                           std::chrono::milliseconds timeout) {
  Scope s(*this, "send_direct");
  validate_peer(peer, "send_direct");
  if (timeout.count() <= 0)
    throw InvalidArgument(
        common::format("send_direct to rank {}: timeout must be > 0 ms, got {}", peer, timeout.count()));
  transport_->send_direct(peer, src, len, buf_id, version, offset, timeout);
}

Request CommImpl::irecv(int peer, uint32_t buf_id, size_t offset, size_t len) {
  Scope s(*this, "irecv");
  validate_peer(peer, "irecv");
  return transport_->irecv(peer, buf_id, offset, len);
}

void CommImpl::close() {
  std::lock_guard<std::mutex> g(close_mu_);  // a second close() returns once the first is done
  if (closed_.exchange(true, std::memory_order_seq_cst)) return;
  // From here every new call throws "closed" and every blocking wait's hook throws within ~20 ms
  // (InterruptPoll::kInterval); the calls in flight return. Wait for them, bounded: every wait of
  // the library is bounded by the timeout anyway.
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + opts_.timeout + std::chrono::seconds(1);
  for (int i = 0; in_flight_.load(std::memory_order_seq_cst) > 0; ++i) {
    if (Clock::now() > deadline) break;
    if (i < 100) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (int64_t n = in_flight_.load(std::memory_order_seq_cst); n > 0) {
    // A call still runs (e.g. close() from inside a call of this communicator on the same thread,
    // or a wait that is not bounded as promised). Freeing the transport under it would be a
    // use-after-free: leak it instead, loudly.
    common::log_line(LogLevel::Warn, opts_.log_level,
                     common::format("close (rank {} of '{}'): {} call(s) still in flight after {} ms; the transport is "
                                    "leaked, not freed under them",
                                    rank_, unique_id_, n, opts_.timeout.count()));
    std::lock_guard<std::mutex> g2(upper_mu_);
    for (auto& kv : upper_) new std::shared_ptr<UpperState>(std::move(kv.second));
    upper_.clear();
    (void)transport_.release();
    return;
  }
  destroy_upper_states();
  if (transport_) transport_->shutdown();
  transport_.reset();
}

Path CommImpl::path_to(int peer) const {
  Scope s(*this, "path_to");
  validate_peer(peer, "path_to");
  return transport_->peer(peer).path;
}

std::string CommImpl::path_reason(int peer) const {
  Scope s(*this, "path_reason");
  validate_peer(peer, "path_reason");
  return transport_->peer(peer).path_reason;
}

bool CommImpl::nvlink_to(int peer) const {
  Scope s(*this, "nvlink_to");
  validate_peer(peer, "nvlink_to");
  return transport_->peer(peer).nvlink;
}

bool CommImpl::shares_process(int peer) const {
  Scope s(*this, "shares_process");
  validate_peer(peer, "shares_process");
  return transport_->peer(peer).same_process;
}

Completion CommImpl::completion_with(int peer) const {
  Scope s(*this, "completion_with");
  validate_peer(peer, "completion_with");
  return transport_->peer(peer).completion;
}

CommStats CommImpl::stats() const {
  CommStats st;
  // After close the counters are gone with the transport: zeros, not an error.
  in_flight_.fetch_add(1, std::memory_order_seq_cst);
  if (!closed_.load(std::memory_order_seq_cst) && transport_) {
    auto& c = transport_->ipc().counters();
    st.exports = c.exports.load();
    st.opens = c.opens.load();
    st.exports_fd = c.exports_fd.load();
    st.opens_fd = c.opens_fd.load();
    st.closes = c.closes.load();
    st.sends_done_seq = transport_->sends_done_seq.load();
    st.sends_ring = transport_->sends_ring.load();
    st.sends_relay = transport_->sends_relay.load();
  }
  leave();
  return st;
}

}  // namespace peerlink::detail
