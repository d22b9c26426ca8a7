#include "transport/link_direct.h"

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "transport/registry.h"
#include "transport/wire.h"

namespace peerlink::detail {

std::exception_ptr mismatch_error(const RecvOp& r, int peer, uint32_t buf_id, uint64_t offset, uint64_t len) {
  return std::make_exception_ptr(
      InvalidArgument(common::format("irecv from rank {} (message {}): expected buffer {} offset {} len {} but the "
                                     "matching send wrote buffer {} offset {} len {}",
                                     peer, r.seq, r.buf_id, r.offset, r.len, buf_id, offset, len)));
}

void finish_recv(RecvOp& r, uint64_t status, uint32_t buf_id, uint64_t offset, uint64_t len, int peer) {
  if (r.finished) return;
  r.finished = true;
  if (status == kStatusOk && (r.buf_id != buf_id || r.offset != offset || r.len != len)) status = kStatusMismatch;
  if (status == kStatusOk) r.req->complete();
  else if (status == kStatusMismatch) r.req->fail(mismatch_error(r, peer, buf_id, offset, len));
  else
    r.req->fail(std::make_exception_ptr(
        InvalidArgument(common::format("{}: the message could not land: {}", r.req->what(), status_text(status)))));
}

void RecvLink::fail_all(std::exception_ptr e) {
  for (auto& r : recvs_)
    if (!r.finished) r.req->fail(e);
  recvs_.clear();
}

void RecvLink::fail_buffer(uint32_t buf_id, const char* why) {
  for (auto& r : recvs_) {
    if (r.finished || r.buf_id != buf_id) continue;
    r.req->fail(std::make_exception_ptr(InvalidArgument(common::format("{}: {}", r.req->what(), why))));
    r.finished = true;
  }
}

// ---- send half ------------------------------------------------------------------------------

void DirectSendLink::submit(const std::shared_ptr<SendOp>& op) {
  if (op->version == 0) {
    op->stage = SendOp::kNew;
  } else {
    op->stage = SendOp::kReady;
    // Steady state: the copy is issued right here, unless an earlier op of the pair (a version-0
    // send waiting for its CTS) has not issued its own yet: then the worker issues it in order.
    if (all_issued()) issue(*op, true);
  }
  ops_.push_back(op);
  last_seq_ = op->seq;
}

// op is kReady and every earlier op has issued its copy.
void DirectSendLink::issue(SendOp& op, bool caller) {
  if (op.cancelled && op.status == kStatusOk) op.status = kStatusCancelled;
  if (op.status == kStatusOk && op.version > 0) {
    // Where the receiver already posted the matching irecv, a send that does not match it is
    // refused before any byte moves (the send fails with InvalidArgument, the irecv with the
    // mismatch). Why here and this way: it turns a write past the irecv's range into an error on
    // both sides for one cache-line read of this op's own record (8 B p50 and 256 MB GB/s on
    // 2x H200 unchanged within noise). Where the irecv is not posted yet the direct path is one-sided
    // by design (no round trip per message): the bytes land in the published range the sender named
    // (never beyond the published buffer) and the irecv fails when it is posted.
    if (auto p = posted_read(env_.out.posted, op.seq))
      if (p->buf_id != op.buf_id || p->offset != op.offset || p->len != op.len) op.status = kStatusMismatch;
  }
  if (op.status != kStatusOk) {  // resolved without a copy; the receiver learns the status
    op.stage = SendOp::kCopied;
    op.map.reset();
    return;
  }
  if (caller && issue_signalled(op)) return;
  op.ticket = q_.copy(op.dst, op.src, op.len, op.len >= env_.opts->stripe_threshold);
  op.issued = true;
  op.stage = SendOp::kCopying;
}

bool DirectSendLink::drain_replies() {
  bool moved = false;
  shm::RingMsg m;
  while (env_.out.ack.pop(&m)) {
    check_reply(m, last_seq_, env_.peer);
    if (m.type == kMsgCts) hs_.on_cts(m);
    else on_ack(m);
    moved = true;
  }
  return moved;
}

void DirectSendLink::on_ack(const shm::RingMsg& m) {
  throw Error(common::format("rank {} sent an ACK on a done_seq pair (corrupted ring)", env_.peer));
}

bool DirectSendLink::progress() {
  bool moved = drain_replies();
  bool blocked = false;  // an earlier op has not issued its copy yet
  for (auto& p : ops_) {
    SendOp& op = *p;
    if (op.stage == SendOp::kNew) {
      if (op.cancelled) op.stage = SendOp::kReady, op.status = kStatusCancelled;
      else if (!hs_.send_rts(op)) break;  // ring full: later RTSs keep their order
      moved = true;
    }
    if (op.stage == SendOp::kAwaitCts) {
      if (op.cancelled) {
        hs_.forget(op.seq);
        op.stage = SendOp::kReady;
        op.status = kStatusCancelled;
        moved = true;
      } else {
        moved |= hs_.resolve(op);
      }
    }
    if (op.stage == SendOp::kReady && !blocked) {
      issue(op, false);
      moved = true;
    }
    if (op.stage < SendOp::kCopying) blocked = true;
    if (op.stage == SendOp::kCopying && q_.done(op.ticket)) {
      op.stage = SendOp::kCopied;
      op.map.reset();  // the copy is done: a replaced mapping may close now
      moved = true;
    }
  }
  // Publish completions in order.
  uint64_t upto = 0;
  for (auto& p : ops_) {
    if (p->signaled) continue;
    if (p->stage != SendOp::kCopied || !publish(*p)) break;
    p->signaled = true;
    upto = p->seq;
    moved = true;
  }
  if (upto) published(upto);
  // Retire from the front.
  bool gpu_retired = false;
  while (!ops_.empty()) {
    SendOp& op = *ops_.front();
    if (!op.signaled || !retire_ready(op)) break;
    gpu_retired |= op.gpu_signal;
    op.map.reset();
    count_retired();
    if (op.status != kStatusOk)
      op.req->fail(std::make_exception_ptr(InvalidArgument(
          common::format("{}: rank {} rejected it: {}", op.req->what(), env_.peer, status_text(op.status)))));
    else
      op.req->complete();
    ops_.pop_front();
    moved = true;
  }
  // The copy stream stored done_seq without waking anyone: a receiver that went to sleep on its
  // doorbell hears it from here (a no-op store when nobody sleeps).
  if (gpu_retired) wake_peer_recv(env_);
  return moved;
}

// An op not yet signalled needs the worker (its copy, RTS or completion is still to go out), and so
// does one the copy stream signals (done_seq is polled); one that waits for its ACK does not.
bool DirectSendLink::needs_worker() const {
  for (auto& op : ops_)
    if (!op->signaled || op->gpu_signal) return true;
  return false;
}

bool DirectSendLink::busy() const {
  for (auto& op : ops_)
    if (op->stage == SendOp::kCopying || op->gpu_signal) return true;
  return false;
}

void DirectSendLink::cancel(SendOp& op) {
  op.cancelled = true;           // kNew / kAwaitCts / kReady: resolved without a copy by progress()
  if (op.issued) q_.wait_all();  // its copy may still read src: local, it finishes
}

void DirectSendLink::fail_all(std::exception_ptr e) {
  for (auto& op : ops_) op->req->fail(e);
  ops_.clear();
  hs_.clear();
}

// ---- receive half ---------------------------------------------------------------------------

void DirectRecvLink::post(RecvOp r) {
  posted_write(env_.in.posted, r.seq, r.buf_id, r.offset, r.len);
  recvs_.push_back(std::move(r));
}

bool DirectRecvLink::progress() {
  bool moved = false;
  shm::RingMsg m;
  while (env_.in.msg.pop(&m)) {
    check_arrival(m, env_.peer);
    if (m.type == kMsgRts) hs_.on_rts(m);
    else on_send_done(m);
    moved = true;
  }
  moved |= hs_.answer(recvs_, pubs_);
  moved |= match();
  return moved;
}

}  // namespace peerlink::detail
