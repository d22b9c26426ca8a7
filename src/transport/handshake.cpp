#include "transport/handshake.h"

#include "common/log.h"
#include "transport/registry.h"

namespace peerlink::detail {

bool HandshakeSender::send_rts(SendOp& op) {
  shm::RingMsg m{kMsgRts, op.buf_id, op.seq, op.offset, op.len, 0, 0, 0, 0};
  if (!env_.out.msg.push(m)) return false;
  env_.peer_recv_bell->ring();
  awaiting_.insert(op.seq);
  op.stage = SendOp::kAwaitCts;
  return true;
}

void HandshakeSender::on_cts(const shm::RingMsg& m) {
  if (awaiting_.count(m.seq)) cts_[m.seq] = m;
}

bool HandshakeSender::resolve(SendOp& op) {
  auto it = cts_.find(op.seq);
  if (it == cts_.end()) return false;
  shm::RingMsg cts = it->second;
  cts_.erase(it);
  awaiting_.erase(op.seq);
  op.stage = SendOp::kReady;
  if (cts.arg0 != kStatusOk) {
    op.status = static_cast<uint32_t>(cts.arg0);
    return true;
  }
  std::optional<Publication> pub = registry_read(env_.out.reg, op.buf_id);
  if (pub && pub->revoked) {
    op.status = kStatusRevoked;
  } else if (!pub || pub->version < cts.version || op.offset > pub->len || op.len > pub->len - op.offset) {
    op.status = kStatusBounds;
  } else {
    // The binding is made from exactly the record just checked, not from a second read of it.
    Binding b = env_.ipc->bind(env_.peer, *pub);
    op.dst = b.ptr + op.offset;
    op.map = b.map;
  }
  return true;
}

void HandshakeSender::forget(uint64_t seq) {
  awaiting_.erase(seq);
  cts_.erase(seq);
}

void HandshakeSender::clear() {
  awaiting_.clear();
  cts_.clear();
}

bool HandshakeResponder::answer(std::deque<RecvOp>& recvs, Publications& pubs) {
  bool moved = false;
  for (auto it = rts_.begin(); it != rts_.end();) {
    const shm::RingMsg& q = it->second;
    if (recvs.empty() || q.seq < recvs.front().seq || q.seq > recvs.back().seq) {
      ++it;
      continue;
    }
    RecvOp& r = recvs[q.seq - recvs.front().seq];
    shm::RingMsg reply{kMsgCts, q.buf_id, q.seq, 0, 0, 0, kStatusOk, 0, 0};
    if (r.buf_id != q.buf_id || r.offset != q.offset || r.len != q.len) {
      reply.arg0 = kStatusMismatch;
    } else {
      std::lock_guard<std::mutex> g(pubs.mu);
      auto pub = pubs.by_id.find(q.buf_id);
      if (pub == pubs.by_id.end()) reply.arg0 = kStatusUnknownBuffer;
      else if (pub->second.revoked) reply.arg0 = kStatusRevoked;
      else if (q.offset > pub->second.len || q.len > pub->second.len - q.offset) reply.arg0 = kStatusBounds;
      else reply.version = pub->second.version;
    }
    if (!env_.in.ack.push(reply)) break;
    env_.peer_send_bell->ring();
    if (reply.arg0 != kStatusOk && !r.finished) {
      r.req->fail(mismatch_error(r, env_.peer, q.buf_id, q.offset, q.len));
      r.finished = true;
    }
    it = rts_.erase(it);
    moved = true;
  }
  return moved;
}

}  // namespace peerlink::detail
