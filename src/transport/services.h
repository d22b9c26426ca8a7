// What the transport offers the layers above it (collectives; later the NCCL layer), in place of a
// public back door into the communicator's implementation. Internal: declared under src/, reached
// through detail::services(comm), which is not exported from libpeerlink.so (mk/libpeerlink.map),
// so applications, the Python binding, tools and benchmarks cannot use it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <typeindex>

#include "gpu/backend.h"
#include "peerlink/communicator.h"
#include "peerlink/options.h"

namespace peerlink::detail {

// Per-communicator state of a layer above the transport (the collectives' buffers, the stream
// engine, ...): a subclass of UpperState, one object per type and communicator, made on first use
// by CommServices::get_or_create<T>() and destroyed by close(), newest first, after every call in
// flight returned and before the transport closes. The transport knows none of these types.
class UpperState {
 public:
  virtual ~UpperState() = default;
};

class CommServices {
 public:
  // Marks one call of an upper layer in flight for its whole duration: close() on another thread
  // waits for it (bounded) before anything is freed, and wakes its blocking waits (their
  // check_interrupt throws InvalidArgument "closed"). Throws InvalidArgument when already closed.
  class Call {
   public:
    Call(Call&& o) noexcept : svc_(o.svc_) { o.svc_ = nullptr; }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;
    Call& operator=(Call&&) = delete;
    ~Call() {
      if (svc_) svc_->end_call();
    }

   private:
    friend class CommServices;
    explicit Call(CommServices* s) : svc_(s) {}
    CommServices* svc_;
  };
  Call begin(const char* what) {
    begin_call(what);
    return Call(this);
  }

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual int device() const = 0;
  virtual const Options& options() const = 0;

  virtual gpu::Backend& backend() = 0;
  // Collective: gathers `bytes` (<= Communicator::kMaxAllgatherBytes) from every rank into
  // all[rank * bytes].
  virtual void allgather(const void* mine, size_t bytes, void* all) = 0;
  virtual void barrier() = 0;
  // Exports the allocation holding [p, p+len) (cached per allocation); *offset = p - base.
  virtual gpu::MemHandle export_memory(const void* p, size_t len, size_t* offset) = 0;
  // Maps a peer's exported allocation once (refcounted); returns its base here. The handle came
  // from a peer: the backend validates it (kind, name, size) before mapping.
  virtual void* open_peer_memory(int peer, const gpu::MemHandle& h) = 0;
  virtual void release_peer_memory(int peer, const gpu::MemHandle& h) = 0;
  // Throws InvalidArgument after close, a stored worker error, or Error after an interrupted
  // barrier or collective (see Options::interrupt_check).
  virtual void check_usable() = 0;
  // Throws PeerLostError naming `peer` when it died or left.
  virtual void check_peer_alive(int peer) = 0;
  // For the wait loops of upper layers' collectives, from the waiting thread (every ~20 ms): runs
  // Options::interrupt_check (and the closing check), whose throw marks the collectives
  // interrupted (check_usable refuses them from then on).
  virtual void check_interrupt() = 0;
  // The communicator's T (an UpperState), made by make() (which returns std::shared_ptr<T>) on the
  // first call. Creations hold the communicator's one setup lock for their whole duration: a setup
  // may be collective (waiting for the other ranks, bounded by the timeout), and another thread's
  // first use of any upper state of this communicator waits for it; other communicators do not.
  // make() may itself create another type's state (the lock is recursive). A make() that throws
  // stores nothing, and the next call tries again.
  template <class T, class Make>
  T& get_or_create(Make&& make) {
    static_assert(std::is_base_of<UpperState, T>::value, "per-communicator state derives from UpperState");
    std::shared_ptr<UpperState> s =
        find_or_create_state(std::type_index(typeid(T)), [&]() -> std::shared_ptr<UpperState> {
          std::shared_ptr<T> made = make();
          return made;
        });
    return static_cast<T&>(*s);  // stored under typeid(T) by the lambda above: a T
  }
  // The communicator's T when some call made it, else null; never creates and never waits for a
  // setup. The pointer keeps the state alive for as long as it is held.
  template <class T>
  std::shared_ptr<T> find() {
    static_assert(std::is_base_of<UpperState, T>::value, "per-communicator state derives from UpperState");
    return std::static_pointer_cast<T>(find_state(std::type_index(typeid(T))));
  }

  // Published buffers and pair paths, for the stream-ordered engine (stream_p2p.h), which reaches
  // the communicator only through this interface. map_published: pointer to [offset, +len) of
  // peer's buffer buf_id published at exactly `version` (waits for it up to the timeout); *hold
  // keeps the mapping open. local_published_len: the length this rank published to peer under
  // buf_id (0: never published), *ptr its base when ptr is not null. notify_ipc_buffer: as
  // Communicator::notify_ipc_buffer. *in_process (when not null): the buffer belongs to a rank of
  // this process, verified against this process's own exports (a peer cannot claim it).
  virtual void* map_published(int peer, uint32_t buf_id, uint64_t version, size_t offset, size_t len,
                              const char* what, std::shared_ptr<void>* hold, bool* in_process = nullptr) = 0;
  virtual uint64_t local_published_len(int peer, uint32_t buf_id, char** ptr) = 0;
  virtual void notify_ipc_buffer(int peer, uint32_t buf_id, void* ptr, size_t len, uint64_t version) = 0;
  // map_published without waiting: nullptr while peer has not published buf_id at `version` (yet);
  // else the base of the whole publication, *len its length. InvalidArgument when it was revoked
  // (freed) or is at another version.
  virtual void* try_map_published(int peer, uint32_t buf_id, uint64_t version, size_t* len,
                                  std::shared_ptr<void>* hold) = 0;
  virtual Path path_to(int peer) const = 0;
  virtual std::string path_reason(int peer) const = 0;  // why path_to(peer) is what it is
  // True when the pair is direct over NVLink or on one GPU (transport/path_policy.h).
  virtual bool nvlink_to(int peer) const = 0;

 protected:
  ~CommServices() = default;
  virtual void begin_call(const char* what) = 0;
  virtual void end_call() noexcept = 0;
  // The typed slots behind get_or_create / find, keyed by the state's type.
  virtual std::shared_ptr<UpperState> find_state(std::type_index type) = 0;
  virtual std::shared_ptr<UpperState> find_or_create_state(
      std::type_index type, const std::function<std::shared_ptr<UpperState>()>& make) = 0;
};

// The services of `comm`'s transport (implemented in communicator.cpp, a friend of Communicator).
CommServices& services(Communicator& comm);

}  // namespace peerlink::detail
