// The transport: rendezvous, per-peer links, IPC manager and the adapter workers.
#pragma once
#include <atomic>
#include <memory>
#include <optional>
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

  void notify(int peer, uint32_t buf_id, void* ptr, size_t len, uint64_t version);
  void wait_buffer(int peer, uint32_t buf_id, uint64_t min_version);
  Request isend(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset, uint64_t version);
  // isend + wait. When the wait fails (timeout, peer lost) the send is given up before this
  // throws: no further byte of src is read, and the receiver's irecv fails.
  // isend + a wait bounded by `timeout` that runs Options::interrupt_check; gives the message up on
  // any failure before rethrowing (it never reads src after returning).
  void send_direct(int peer, const void* src, size_t len, uint32_t buf_id, uint64_t version, size_t offset,
                   std::chrono::milliseconds timeout);
  Request irecv(int peer, uint32_t buf_id, size_t offset, size_t len);
  // Frees memory from alloc(): first revokes every publication inside the allocation (senders get
  // InvalidArgument instead of writing; pending irecvs into it fail), then frees it.
  void free_memory(void* p);
  // Throws PeerLostError when `peer` died or left (checked at most every 100 ms per peer).
  void check_peer(int peer);
  // Stream engine (stream_bind.cpp): the mapping of peer's buffer buf_id published at exactly
  // `version` (newer: stale InvalidArgument; older: waits), range-checked; and the length this rank
  // published to `peer` under buf_id (0: never).
  Binding bind_published(int peer, uint32_t buf_id, uint64_t version, size_t offset, size_t len, const char* what);
  // bind_published without waiting: nullopt while not published at `version` (stream_bind.cpp).
  std::optional<Binding> try_bind_published(int peer, uint32_t buf_id, uint64_t version, const char* what);
  uint64_t published_len(int peer, uint32_t buf_id, char** ptr = nullptr);  // *ptr: its base (GPU LL recv)
  // Stops the workers, fails what is pending, leaves the rendezvous. Idempotent.
  void shutdown();
  // A fatal worker error, rethrown on the caller's next call.
  void rethrow_worker_error();

  LinkCounters counters;
  std::atomic<uint64_t>& sends_done_seq = counters.sends_done_seq;
  std::atomic<uint64_t>& sends_ring = counters.sends_ring;
  std::atomic<uint64_t>& sends_relay = counters.sends_relay;

 private:
  struct SendHandle {
    Request req;
    std::shared_ptr<SendOp> op;
  };
  SendHandle submit_send(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset, uint64_t version);
  void setup_links();
  void exchange_join_info(std::vector<std::string>& bus_ids, std::vector<Completion>& prefs);
  // The steps of setup_links, in order (setup.cpp says what each does).
  void choose_peer_paths(const std::vector<std::string>& bus_ids);
  void create_owned_segments();
  void create_relay_out(Peer& P);
  void map_peer_segments();
  void map_relay_in(Peer& P);
  void create_control_segment();
  void decide_completion(const std::vector<Completion>& prefs);
  void build_links(Peer& P);
  // A segment `name` that rank `owner` should have created is missing or malformed: PeerLostError
  // when the owner died or left, else Error.
  [[noreturn]] void missing_segment(const std::string& name, int owner, const char* what);
  void send_worker_main();
  void recv_worker_main();
  void mark_lost(Peer& p, std::exception_ptr e);
  // PairProgress::poll: what a worker would do for P's receive or send link, on the waiting
  // thread, when the pair's lock is free (else *lock_taken, when given, is set). True when
  // anything moved.
  friend class PairProgress;
  bool progress_on_caller(Peer& P, bool recv, bool* lock_taken = nullptr) noexcept;
  // check_peer for a waiting thread: a lost peer marks the pair lost (its requests fail); no throw.
  void check_peer_quietly(Peer& P) noexcept;
  // Records the calling thread's CPU as this rank's (ControlLayout::cpu) and tells whether P's
  // last recorded CPU is the same one.
  bool peer_on_this_cpu(Peer& P) noexcept;
  void note_cpu() noexcept;
  void fail_pending_sends(Peer& p, std::exception_ptr e);
  void fail_pending_recvs(Peer& p, std::exception_ptr e);
  Publication wait_publication(int peer, uint32_t buf_id, uint64_t min_version, const char* what);
  std::shared_ptr<RequestState> new_request(const char* kind, int peer, uint32_t buf_id, uint64_t offset,
                                            uint64_t len, uint64_t version, uint64_t seq);
  void wake_send_worker() {
    if (ctl_) ctl_->send_bell[rank_].ring();
  }
  void wake_recv_worker() {
    if (ctl_) ctl_->recv_bell[rank_].ring();
  }

  int rank_, world_, device_;
  Options opts_;
  std::unique_ptr<bootstrap::Bootstrap> boot_;
  std::unique_ptr<gpu::Backend> backend_;
  std::unique_ptr<IpcManager> ipc_;
  common::Segment ctl_seg_;  // the transport's control segment (layout.h ControlLayout)
  ControlLayout* ctl_ = nullptr;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::atomic<bool> running_{false};
  std::thread send_thread_, recv_thread_;
  std::mutex error_mu_;
  std::exception_ptr worker_error_;
  std::atomic<bool> shut_{false};
};

}  // namespace peerlink::detail
