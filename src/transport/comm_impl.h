// The communicator's private implementation. Layers above the transport (collectives, Python)
// use the "services" section; everything else is transport-internal.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "gpu/backend.h"
#include "peerlink/communicator.h"
#include "peerlink/options.h"

namespace peerlink::detail {

class Transport;  // transport/transport.h: peers, workers, IPC manager, registry

class CommImpl {
 public:
  CommImpl(std::string unique_id, int rank, int world_size, int device, Options opts);
  ~CommImpl();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int device() const { return device_; }
  const Options& options() const { return opts_; }
  const std::string& unique_id() const { return unique_id_; }
  // "pl_<id>_<hash>_<nonce>_": every SHM name of this job starts with it.
  const std::string& shm_prefix() const;

  // ---- services for layers above the transport -------------------------------------------
  gpu::Backend& backend();
  // Collective: gathers `bytes` (<= kMaxAllgatherBytes) from every rank into all[rank * bytes].
  static constexpr size_t kMaxAllgatherBytes = 1024;
  void allgather(const void* mine, size_t bytes, void* all);
  void barrier();
  // Exports the allocation holding [p, p+len) (cached per allocation); *offset = p - base.
  gpu::MemHandle export_memory(const void* p, size_t len, size_t* offset);
  // Maps a peer's exported allocation once (refcounted); returns its base here.
  void* open_peer_memory(int peer, const gpu::MemHandle& h);
  void release_peer_memory(int peer, const gpu::MemHandle& h);
  // Throws InvalidArgument after close, a stored worker error, or Error after an interrupted
  // barrier or collective (see Options::interrupt_check).
  void check_usable();
  // Throws PeerLostError naming `peer` when it died or left.
  void check_peer_alive(int peer);
  // For the wait loops of upper layers' collectives, from the waiting thread (every ~20 ms): runs
  // Options::interrupt_check, whose throw marks the collectives interrupted (check_usable refuses
  // them from then on).
  void check_interrupt();
  // Per-communicator state owned by an upper layer; destroyed before the transport closes.
  std::shared_ptr<void>& upper_state(const std::string& key);
  // Stream engine (stream_bind.cpp): pointer to [offset, +len) of peer's buffer buf_id published at
  // exactly `version` (waits for it up to the timeout); *hold keeps the mapping open. And the length
  // this rank published to peer under buf_id (0: never published).
  void* map_published(int peer, uint32_t buf_id, uint64_t version, size_t offset, size_t len, const char* what,
                      std::shared_ptr<void>* hold);
  uint64_t local_published_len(int peer, uint32_t buf_id);

  // ---- the public API (Communicator forwards here) -----------------------------------------
  void* alloc(size_t bytes);
  void free(void* p);
  void notify_ipc_buffer(int peer, uint32_t buf_id, void* ptr, size_t len, uint64_t version);
  void wait_ipc_buffer(int peer, uint32_t buf_id, uint64_t min_version);
  Request isend(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset,
                uint64_t version);
  Request irecv(int peer, uint32_t buf_id, size_t offset, size_t len);
  void close();
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  Path path_to(int peer) const;
  Completion completion_with(int peer) const;
  CommStats stats() const;

 private:
  // check_usable() without the interrupted-collectives check: memory services stay usable.
  void check_open();
  void validate_peer(int peer, const char* what) const;

  std::string unique_id_;
  int rank_;
  int world_size_;
  int device_;
  Options opts_;
  std::atomic<bool> closed_{false};
  std::mutex upper_mu_;
  std::map<std::string, std::shared_ptr<void>> upper_;
  std::unique_ptr<Transport> transport_;
};

}  // namespace peerlink::detail
