// Direct path with done_seq completion: the sender writes send k's descriptor, then raises its
// done_seq counter to k (on GPUs the copy stream stores it after the copy, no CPU hop); irecv k
// completes when done_seq >= k. The receiver returns descriptor credit through `consumed`.
#include <algorithm>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "transport/link_direct.h"
#include "transport/links.h"
#include "transport/wire.h"

namespace peerlink::detail {
namespace {

class DoneSeqSendLink final : public DirectSendLink {
 public:
  DoneSeqSendLink(PairEnv& env, gpu::CopyQueue& q, shm::PaddedCounter* done_out, bool chan_pinned)
      : DirectSendLink(env, q), done_out_(done_out), chan_pinned_(chan_pinned) {}

 private:
  bool has_credit(uint64_t seq, std::memory_order mo = std::memory_order_acquire) const {
    return seq <= env_.out.consumed->value.load(mo) + kDescSlots;
  }
  // The one place a descriptor is published (before done_seq covers it).
  void write_desc(const SendOp& op) {
    Desc& d = env_.out.desc[op.seq % kDescSlots];
    d.buf_id = op.buf_id;
    d.status = op.status;
    d.offset = op.offset;
    d.len = op.len;
    d.seq.store(op.seq, std::memory_order_release);
  }

  // GPU steady state: the copy stream also stores done_seq after the copy, so completion needs no
  // CPU hop at all; only while every earlier op is signalled the same way (done_seq must never
  // regress) and descriptor credit allows.
  bool issue_signalled(SendOp& op) override {
    if (!chan_pinned_ || !has_credit(op.seq)) return false;
    for (auto& prev : ops_)
      if (!prev->gpu_signal) return false;
    write_desc(op);
    auto* word = reinterpret_cast<uint64_t*>(&done_out_->value);
    if (op.len > 0 && op.len <= std::max(env_.opts->kernel_copy_max, q_.armed_max())) {
      // Small: one kernel copies and stores done_seq (launched ahead of the message when the queue
      // arms sends; the copy engine's start-up costs more than either).
      if (!q_.copy_and_signal(op.dst, op.src, op.len, word, op.seq))
        throw Error("copy queue cannot run the signalling copy kernel");
    } else {
      op.ticket = q_.copy(op.dst, op.src, op.len, op.len >= env_.opts->stripe_threshold, false);
      if (!q_.signal_after(word, op.seq)) throw Error("copy queue cannot signal done_seq");
    }
    op.issued = true;
    op.gpu_signal = true;
    op.signaled = true;
    op.stage = SendOp::kCopied;  // completion is done_seq itself: no event to poll
    return true;
  }
  bool publish(SendOp& op) override {
    if (!has_credit(op.seq)) {
      // Ask for a ring when credit returns, then look again: the receiver stores `consumed` and
      // then reads the request (all sequentially consistent), so one of us sees the other.
      env_.out.credit_wanted->value.store(1, std::memory_order_seq_cst);
      if (!has_credit(op.seq, std::memory_order_seq_cst)) return false;
    }
    write_desc(op);
    return true;
  }
  void published(uint64_t upto) override {
    done_out_->value.store(upto, std::memory_order_release);
    wake_peer_recv(env_);
  }
  bool retire_ready(SendOp& op) override {
    return !op.gpu_signal || done_out_->value.load(std::memory_order_acquire) >= op.seq;
  }
  void count_retired() override { env_.counters->sends_done_seq.fetch_add(1, std::memory_order_relaxed); }

  shm::PaddedCounter* done_out_;
  bool chan_pinned_;
};

class DoneSeqRecvLink final : public DirectRecvLink {
 public:
  DoneSeqRecvLink(PairEnv& env, Publications& pubs, shm::PaddedCounter* done_in)
      : DirectRecvLink(env, pubs), done_in_(done_in) {}

  // An arrival is done_seq plus its descriptor: the waiting thread matches it as the worker would.
  // Version-0 handshakes (RTS on the message ring) stay with the worker (needs_worker_after_post).
  bool caller_progress() override { return match(); }

 private:
  void on_send_done(const shm::RingMsg& m) override {
    throw Error(common::format("rank {} sent SEND_DONE on a done_seq pair (corrupted ring)", env_.peer));
  }
  bool match() override {
    bool moved = false;
    uint64_t done = done_in_->value.load(std::memory_order_acquire);
    uint64_t consumed = 0;
    while (!recvs_.empty() && recvs_.front().seq <= done) {
      RecvOp& r = recvs_.front();
      const Desc& d = env_.in.desc[r.seq % kDescSlots];
      DescRecord raw{d.seq.load(std::memory_order_acquire), d.buf_id, d.status, d.offset, d.len};
      DescRecord v = parse_desc(raw, r.seq, env_.peer);
      finish_recv(r, v.status, v.buf_id, v.offset, v.len, env_.peer);
      consumed = r.seq;
      recvs_.pop_front();
      moved = true;
    }
    if (consumed) {
      // Descriptor credit; the sender's worker is woken only when it waits for credit.
      env_.in.consumed->value.store(consumed, std::memory_order_seq_cst);
      if (env_.in.credit_wanted->value.load(std::memory_order_seq_cst) != 0 &&
          env_.in.credit_wanted->value.exchange(0, std::memory_order_seq_cst) != 0)
        env_.peer_send_bell->ring();
    }
    return moved;
  }

  // A message the sender described (its descriptor is out) but whose done_seq has not come: its
  // copy is in flight, so the receive worker polls done_seq instead of sleeping until the sender's
  // worker rings (one wake-up and one ring fewer at the end of every transfer that outlasts the
  // worker's spin).
  bool busy() const override {
    if (recvs_.empty()) return false;
    const uint64_t s = recvs_.front().seq;
    return env_.in.desc[s % kDescSlots].seq.load(std::memory_order_acquire) == s &&
           done_in_->value.load(std::memory_order_acquire) < s;
  }

  shm::PaddedCounter* done_in_;
};

}  // namespace

PairLinks make_done_seq_links(PairEnv& env, Publications& pubs, const LinkResources& res) {
  PairLinks l;
  l.send = std::make_unique<DoneSeqSendLink>(env, *res.send_queue, res.done_out, res.chan_pinned);
  l.recv = std::make_unique<DoneSeqRecvLink>(env, pubs, res.done_in);
  return l;
}

}  // namespace peerlink::detail
