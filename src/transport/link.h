// Links: the per-pair protocol objects. A pair (this rank, peer) has one SendLink (messages to the
// peer) and one RecvLink (messages from it), chosen once at setup (make_links, links.cpp) by data
// path x completion:
//
//   direct + done_seq   link_done_seq.cpp   copy into the peer's published buffer, descriptor +
//                                           done_seq counter (the GPU copy stream stores it itself)
//   direct + ring       link_ring.cpp       copy, then SEND_DONE on the SHM ring, ACK back
//   relay               link_relay.cpp      chunks through a pinned staging ring; arrivals matched
//                                           in order like the ring's
//   version 0           handshake.cpp       RTS/CTS addressing used by both direct links
//
// The workers drive links generically (progress / pending / busy) under the pair's send or receive
// lock; callers submit and post under the same locks. A link owns every bit of its protocol state.
// A new path (stream-ordered, kernel-initiated, VMM-mapped) is a new SendLink/RecvLink pair plus
// its line in make_links.
#pragma once
#include <atomic>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>

#include "common/futex.h"
#include "peerlink/options.h"
#include "transport/ipc_manager.h"
#include "transport/layout.h"
#include "transport/request_state.h"

namespace peerlink::detail {

struct SendOp {
  enum Stage {
    kNew,       // version 0: the RTS is not sent yet
    kAwaitCts,  // version 0: waiting for the receiver's registration
    kReady,     // addressed (dst or a failure status); its copy waits for every earlier op's
    kCopying,   // copy issued (reads src until it completes)
    kCopied,    // landed, or resolved without a copy (status != ok)
    kRelay,     // relay: chunked by the relay link
  };
  std::shared_ptr<RequestState> req;
  uint64_t seq = 0;
  const char* src = nullptr;
  size_t len = 0;
  uint32_t buf_id = 0;
  size_t offset = 0;
  uint64_t version = 0;
  char* dst = nullptr;
  std::shared_ptr<Mapping> map;  // keeps the destination mapped until the copy completed
  Stage stage = kNew;
  uint64_t ticket = 0;
  bool signaled = false;    // completion published to the receiver
  bool gpu_signal = false;  // done_seq is stored by the copy stream itself (no CPU hop)
  bool issued = false;      // a copy reading src was enqueued (cancel waits for the queue)
  bool cancelled = false;   // the caller gave up: no copy from src is issued from now on
  uint32_t status = 0;      // MsgStatus carried in the descriptor / SEND_DONE / relay metadata
  size_t relay_issued = 0;  // bytes handed to staging
};

struct RecvOp {
  std::shared_ptr<RequestState> req;
  bool finished = false;  // failed early (handshake rejected, buffer freed); popped when its seq passes
  uint64_t seq = 0;
  uint32_t buf_id = 0;
  size_t offset = 0;
  size_t len = 0;
};

// Receiver's own record of what it published to one peer (relay destinations, CTS replies).
struct LocalPublication {
  char* ptr = nullptr;
  uint64_t len = 0;
  uint64_t version = 0;
  RegSlot* slot = nullptr;
  bool revoked = false;  // its memory was freed: not a destination any more (kept for its version)
};
struct Publications {
  std::mutex mu;
  std::map<uint32_t, LocalPublication> by_id;
};

struct LinkCounters {
  std::atomic<uint64_t> sends_done_seq{0}, sends_ring{0}, sends_relay{0};
};

// What every link of a pair shares: the pair's views and the peer's doorbells.
struct PairEnv {
  int peer = -1;
  const Options* opts = nullptr;
  IpcManager* ipc = nullptr;
  LinkCounters* counters = nullptr;
  PairView out, in;                          // out: me->peer (I send), in: peer->me (I receive)
  common::Doorbell* peer_recv_bell = nullptr;  // wakes the peer's receive worker
  common::Doorbell* peer_send_bell = nullptr;  // wakes the peer's send worker
  common::Doorbell* peer_wait_bell = nullptr;  // wakes the peer's threads waiting on requests
};

// After a publication towards the peer's receive side (or its send side: an ACK): the peer's
// waiting thread when it has one on this pair, else its worker.
inline void wake_peer_recv(PairEnv& env) {
  (peer_waiting(env.out.recv_waiting) ? env.peer_wait_bell : env.peer_recv_bell)->ring();
}
inline void wake_peer_send(PairEnv& env) {
  (peer_waiting(env.in.send_waiting) ? env.peer_wait_bell : env.peer_send_bell)->ring();
}

class SendLink {
 public:
  virtual ~SendLink() = default;
  // Caller thread, send lock held, op->seq assigned. May issue the copy right here (direct steady
  // state); throws when it cannot (then nothing was issued and the seq is not consumed).
  virtual void submit(const std::shared_ptr<SendOp>& op) = 0;
  // Send worker, send lock held. True when anything moved.
  virtual bool progress() = 0;
  // No op queued: the worker still lets the link drain replies.
  virtual void idle_poll() {}
  virtual bool pending() const = 0;
  virtual bool busy() const = 0;  // copies in flight whose completion is polled
  // Pending work the send worker must drive: false when what is pending only waits for a reply
  // that wakes the worker itself (an ACK rings the send bell).
  virtual bool needs_worker() const { return pending(); }
  // The caller's call failed (send_direct): from now on no copy from op.src is issued, copies
  // already issued are waited for (they are local and finish), and the receiver learns that the
  // message failed. Send lock held. op may already be gone from the link (failed, peer lost).
  virtual void cancel(SendOp& op) = 0;
  // Fails every queued op (peer lost, shutdown).
  virtual void fail_all(std::exception_ptr e) = 0;
};

class RecvLink {
 public:
  virtual ~RecvLink() = default;
  // Caller thread, receive lock held: queues the irecv (r.seq assigned).
  virtual void post(RecvOp r) { recvs_.push_back(std::move(r)); }
  // Receive worker, receive lock held. True when anything moved.
  virtual bool progress() = 0;
  bool pending() const { return !recvs_.empty(); }
  virtual bool busy() const { return false; }
  // Whether a thread waiting on one of the irecvs may complete arrivals itself (caller_progress):
  // direct links, whose arrivals are shared-memory words and messages; not the relay, whose
  // arrivals need copies (the receive worker's).
  virtual bool completes_on_caller() const { return false; }
  // Waiting thread (or irecv right after posting), receive lock held: completes what has arrived.
  virtual bool caller_progress() { return false; }
  // After post(), receive lock held: whether the worker must look (a handshake waits for it).
  virtual bool needs_worker_after_post() const { return true; }
  void fail_all(std::exception_ptr e);
  // Fails the pending irecvs into buffer `buf_id` (it was freed); they keep their place in the order.
  void fail_buffer(uint32_t buf_id, const char* why);

 protected:
  std::deque<RecvOp> recvs_;
};

std::exception_ptr mismatch_error(const RecvOp& r, int peer, uint32_t buf_id, uint64_t offset, uint64_t len);
// Completes or fails irecv r for an arrival whose sender wrote (buf_id, offset, len) with `status`
// (a different range than r's is a mismatch). No-op when r already failed.
void finish_recv(RecvOp& r, uint64_t status, uint32_t buf_id, uint64_t offset, uint64_t len, int peer);

}  // namespace peerlink::detail
