// Direct path with ring completion: after the copy the sender pushes SEND_DONE on the SHM ring; the
// receiver matches it to the irecv of its seq and ACKs it (with a status); the send completes on
// the ACK. Used when the done_seq channel is refused or never became ready.
#include "common/log.h"
#include "transport/link_direct.h"
#include "transport/links.h"

namespace peerlink::detail {
namespace {

class RingSendLink final : public DirectSendLink {
 public:
  using DirectSendLink::DirectSendLink;

 private:
  bool publish(SendOp& op) override {
    shm::RingMsg m{kMsgSendDone, op.buf_id, op.seq, op.offset, op.len, op.version, op.status, 0, 0};
    return env_.out.msg.push(m);
  }
  void published(uint64_t) override { wake_peer_recv(env_); }
  void on_ack(const shm::RingMsg& m) override {
    acked_ = std::max(acked_, m.seq);
    if (m.arg0 != kStatusOk) ack_status_[m.seq] = m.arg0;
  }
  bool retire_ready(SendOp& op) override {
    if (acked_ < op.seq) return false;  // complete on the receiver's ACK
    auto st = ack_status_.find(op.seq);
    if (st != ack_status_.end()) {
      if (op.status == kStatusOk) op.status = static_cast<uint32_t>(st->second);
      ack_status_.erase(st);
    }
    return true;
  }
  void count_retired() override { env_.counters->sends_ring.fetch_add(1, std::memory_order_relaxed); }

  uint64_t acked_ = 0;
  std::map<uint64_t, uint64_t> ack_status_;  // non-OK ACKs by seq
};

class RingRecvLink final : public DirectRecvLink {
 public:
  using DirectRecvLink::DirectRecvLink;

 private:
  void on_send_done(const shm::RingMsg& m) override { arrivals_.arrived(m); }
  bool match() override { return arrivals_.match(recvs_, env_, true); }
  // SEND_DONE messages, matching and the ACK: the waiting thread does what the worker would.
  bool caller_progress() override { return progress(); }

  ArrivalMatcher arrivals_;
};

}  // namespace

PairLinks make_ring_links(PairEnv& env, Publications& pubs, const LinkResources& res) {
  PairLinks l;
  l.send = std::make_unique<RingSendLink>(env, *res.send_queue);
  l.recv = std::make_unique<RingRecvLink>(env, pubs);
  return l;
}

}  // namespace peerlink::detail
