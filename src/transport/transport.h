// The transport: rendezvous, per-peer links, IPC manager and the adapter workers.
#pragma once
#include <atomic>
#include <condition_variable>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "peerlink/communicator.h"
#include "transport/ipc_manager.h"
#include "transport/peer.h"

namespace peerlink::detail {

class Transport {
 public:
  Transport(const std::string& unique_id, int rank, int world, int device, const Options& opts);
  ~Transport();

  bootstrap::Bootstrap& boot() { return *boot_; }
  gpu::Backend& backend() { return *backend_; }
  IpcManager& ipc() { return *ipc_; }
  Peer& peer(int r) { return *peers_[r]; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  const Options& opts() const { return opts_; }

  void notify(int peer, uint32_t buf_id, void* ptr, size_t len, uint64_t version);
  void wait_buffer(int peer, uint32_t buf_id, uint64_t min_version);
  Request isend(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset, uint64_t version);
  Request irecv(int peer, uint32_t buf_id, size_t offset, size_t len);
  // Throws PeerLostError when `peer` died or left (checked at most every 100 ms per peer).
  void check_peer(int peer);
  // Stream engine (stream_bind.cpp): the mapping of peer's buffer buf_id published at exactly
  // `version` (newer: stale InvalidArgument; older: waits), range-checked; and the length this rank
  // published to `peer` under buf_id (0: never).
  Binding bind_published(int peer, uint32_t buf_id, uint64_t version, size_t offset, size_t len, const char* what);
  uint64_t published_len(int peer, uint32_t buf_id);
  // Stops the workers, fails what is pending, leaves the rendezvous. Idempotent.
  void shutdown();
  // A fatal worker error, rethrown on the caller's next call.
  void rethrow_worker_error();

  std::atomic<uint64_t> sends_done_seq{0}, sends_ring{0}, sends_relay{0};

 private:
  void setup_links();
  void decide_completion();
  void send_worker_main();
  void recv_worker_main();
  bool progress_sends(Peer& p);
  bool progress_relay_send(Peer& p);
  bool progress_recvs(Peer& p);
  bool progress_relay_recv(Peer& p);
  void drain_acks(Peer& p);
  void mark_lost(Peer& p, std::exception_ptr e);
  void fail_pending_sends(Peer& p, std::exception_ptr e);
  void fail_pending_recvs(Peer& p, std::exception_ptr e);
  bool liveness_sweep(bool sends, int64_t& last_ns);
  Publication wait_publication(int peer, uint32_t buf_id, uint64_t min_version, const char* what);
  std::shared_ptr<RequestState> new_request(const char* kind, int peer, uint32_t buf_id, uint64_t offset,
                                            uint64_t len, uint64_t version, uint64_t seq);
  void wake_send_worker();
  void wake_recv_worker();

  int rank_, world_, device_;
  Options opts_;
  std::unique_ptr<bootstrap::Bootstrap> boot_;
  std::unique_ptr<gpu::Backend> backend_;
  std::unique_ptr<IpcManager> ipc_;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::atomic<bool> running_{false};
  std::thread send_thread_, recv_thread_;
  std::mutex error_mu_;
  std::exception_ptr worker_error_;
  bool shut_ = false;
};

}  // namespace peerlink::detail
