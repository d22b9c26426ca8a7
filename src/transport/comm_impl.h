// The communicator's private implementation: argument checks, the closed/in-flight rule, then the
// transport. Layers above the transport see only its CommServices face (services.h).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <typeindex>
#include <utility>
#include <vector>

#include "gpu/backend.h"
#include "peerlink/communicator.h"
#include "peerlink/options.h"
#include "transport/services.h"

namespace peerlink::detail {

class Transport;  // transport/transport.h: peers, workers, IPC manager, registry

class CommImpl final : public CommServices {
 public:
  CommImpl(std::string unique_id, int rank, int world_size, int device, Options opts);
  ~CommImpl();

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int device() const override { return device_; }
  const Options& options() const override { return opts_; }
  const std::string& unique_id() const { return unique_id_; }

  // ---- CommServices (layers above the transport) -------------------------------------------
  gpu::Backend& backend() override;
  void allgather(const void* mine, size_t bytes, void* all) override;
  void barrier() override;
  gpu::MemHandle export_memory(const void* p, size_t len, size_t* offset) override;
  void* open_peer_memory(int peer, const gpu::MemHandle& h) override;
  void release_peer_memory(int peer, const gpu::MemHandle& h) override;
  void check_usable() override;
  void check_peer_alive(int peer) override;
  void check_interrupt() override;
  // The stream engine's services (stream_bind.cpp; services.h says what they do).
  void* map_published(int peer, uint32_t buf_id, uint64_t version, size_t offset, size_t len, const char* what,
                      std::shared_ptr<void>* hold, bool* in_process = nullptr) override;
  uint64_t local_published_len(int peer, uint32_t buf_id, char** ptr) override;
  void* try_map_published(int peer, uint32_t buf_id, uint64_t version, size_t* len,
                          std::shared_ptr<void>* hold) override;

  // ---- the public API (Communicator forwards here) -----------------------------------------
  void* alloc(size_t bytes);
  void free(void* p);
  void notify_ipc_buffer(int peer, uint32_t buf_id, void* ptr, size_t len, uint64_t version) override;
  void wait_ipc_buffer(int peer, uint32_t buf_id, uint64_t min_version);
  Request isend(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset,
                uint64_t version);
  // isend + wait; on failure the send is given up before the error returns (never reads src again)
  void send_direct(int peer, const void* src, size_t len, uint32_t buf_id, uint64_t version, size_t offset,
                   std::chrono::milliseconds timeout);
  Request irecv(int peer, uint32_t buf_id, size_t offset, size_t len);
  void close();
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  Path path_to(int peer) const override;
  std::string path_reason(int peer) const override;  // why path_to(peer) is what it is
  bool nvlink_to(int peer) const override;
  bool shares_process(int peer) const;
  Completion completion_with(int peer) const;
  CommStats stats() const;

 protected:
  void begin_call(const char* what) override { enter(what); }
  void end_call() noexcept override { leave(); }
  std::shared_ptr<UpperState> find_state(std::type_index type) override;
  std::shared_ptr<UpperState> find_or_create_state(std::type_index type,
                                                   const std::function<std::shared_ptr<UpperState>()>& make) override;

 private:
  // The in-flight rule (close() while other threads are inside calls): every call that touches
  // transport_ runs between enter() and leave(). enter() counts the call, then checks closed_;
  // close() sets closed_, then waits for the count to reach zero. Both sides use sequentially
  // consistent operations, so either the call sees closed_ (and throws) or close() sees the count
  // (and waits): never a call on a freed transport.
  void enter(const char* what) const;
  void leave() const noexcept;
  class Scope;  // enter() ... leave()
  [[noreturn]] void throw_closed(const char* what) const;
  // check_usable() without the interrupted-collectives check: memory services stay usable.
  void check_open(const char* what);
  void validate_peer(int peer, const char* what) const;
  std::shared_ptr<UpperState> find_state_locked(std::type_index type) const;  // caller holds upper_mu_
  // Destroys the upper layers' states, newest first (close()).
  void destroy_upper_states();
  // True on the thread that runs close()'s destruction of the upper layers' state: their
  // destructors free their memory and release their mappings through backend() /
  // release_peer_memory() although the communicator is already marked closed (no call is in
  // flight then, and the transport still exists).
  bool in_upper_teardown() const {
    return upper_teardown_.load(std::memory_order_acquire) == std::this_thread::get_id();
  }

  std::string unique_id_;
  int rank_;
  int world_size_;
  int device_;
  Options opts_;  // as given; the transport gets a copy whose interrupt_check also notices close()
  std::atomic<bool> closed_{false};
  mutable std::atomic<int64_t> in_flight_{0};
  std::mutex close_mu_;  // concurrent close() calls: the second waits for the first to finish
  // The upper layers' states, in creation order (get_or_create). upper_mu_ guards the list only;
  // setup_mu_ is the one setup lock, held while a state is made.
  std::recursive_mutex setup_mu_;
  std::mutex upper_mu_;
  std::vector<std::pair<std::type_index, std::shared_ptr<UpperState>>> upper_;
  std::atomic<std::thread::id> upper_teardown_{};  // the thread destroying upper_, else none
  std::unique_ptr<Transport> transport_;
};

}  // namespace peerlink::detail
