// The direct data path, shared by its two completions (done_seq, ring): the sender copies straight
// into the receiver's published buffer. The subclasses differ only in how completion travels.
#pragma once
#include <deque>
#include <memory>

#include "gpu/backend.h"
#include "transport/handshake.h"
#include "transport/link.h"

namespace peerlink::detail {

class DirectSendLink : public SendLink {
 public:
  DirectSendLink(PairEnv& env, gpu::CopyQueue& q) : env_(env), q_(q), hs_(env) {}
  void submit(const std::shared_ptr<SendOp>& op) override;
  bool progress() override;
  void idle_poll() override {
    if (!env_.out.ack.empty()) drain_replies();
  }
  bool pending() const override { return !ops_.empty(); }
  bool busy() const override;
  bool needs_worker() const override;
  void cancel(SendOp& op) override;
  void fail_all(std::exception_ptr e) override;

 protected:
  // Caller thread only: issue op's copy with a completion the copy stream signals itself.
  // False when this completion cannot (then the copy is issued plainly).
  virtual bool issue_signalled(SendOp& op) { return false; }
  // Publishes op's completion to the receiver, in seq order; false: no room yet, retry later.
  virtual bool publish(SendOp& op) = 0;
  virtual void published(uint64_t upto) = 0;  // after a batch of publish() up to `upto`
  // op is signalled; true when it may complete (ring: its ACK arrived).
  virtual bool retire_ready(SendOp& op) = 0;
  virtual void on_ack(const shm::RingMsg& m);
  virtual void count_retired() = 0;

  bool drain_replies();
  // Every earlier op has issued its copy (or resolved without one): FIFO across paths.
  bool all_issued() const { return ops_.empty() || ops_.back()->stage >= SendOp::kCopying; }
  void issue(SendOp& op, bool caller);

  PairEnv& env_;
  gpu::CopyQueue& q_;
  HandshakeSender hs_;
  std::deque<std::shared_ptr<SendOp>> ops_;
  uint64_t last_seq_ = 0;  // highest seq submitted (replies above it are corrupt)
};

// Receive half of both direct links: answers the handshake, publishes posted irecvs for the
// sender's range check, and matches completions (subclass) in FIFO order.
class DirectRecvLink : public RecvLink {
 public:
  DirectRecvLink(PairEnv& env, Publications& pubs) : env_(env), pubs_(pubs), hs_(env) {}
  void post(RecvOp r) override;
  bool progress() override;
  bool completes_on_caller() const override { return true; }
  bool needs_worker_after_post() const override { return !env_.in.msg.empty() || hs_.pending(); }

 protected:
  virtual void on_send_done(const shm::RingMsg& m) = 0;
  virtual bool match() = 0;

  PairEnv& env_;
  Publications& pubs_;
  HandshakeResponder hs_;
};

}  // namespace peerlink::detail
