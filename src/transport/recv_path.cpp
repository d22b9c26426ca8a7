// Receive side: buffer publication (notify / wait), irecv, and the receive worker, which matches
// arrivals to irecvs in FIFO order (done_seq + descriptors, or SEND_DONE on the ring with an ACK),
// answers legacy RTS requests and drains relay staging chunks into published buffers.
#include "common/log.h"
#include "peerlink/errors.h"
#include "transport/transport.h"
#include "transport/worker_loop.h"

namespace peerlink::detail {
namespace {
using common::cat;

bool same_range(const RecvOp& r, uint32_t buf_id, uint64_t offset, uint64_t len) {
  return r.buf_id == buf_id && r.offset == offset && r.len == len;
}

std::exception_ptr mismatch(const RecvOp& r, int peer, uint32_t buf_id, uint64_t offset, uint64_t len) {
  return std::make_exception_ptr(InvalidArgument(
      cat("irecv from rank ", peer, " (message ", r.seq, "): expected buffer ", r.buf_id, " offset ", r.offset, " len ",
          r.len, " but the matching send wrote buffer ", buf_id, " offset ", offset, " len ", len)));
}
}  // namespace

void Transport::notify(int peer, uint32_t buf_id, void* ptr, size_t len, uint64_t version) {
  rethrow_worker_error();
  if (!ptr) throw InvalidArgument(cat("notify_ipc_buffer(peer ", peer, ", buffer ", buf_id, "): ptr is null"));
  if (len == 0) throw InvalidArgument(cat("notify_ipc_buffer(peer ", peer, ", buffer ", buf_id, "): len is 0"));
  if (version == 0)
    throw InvalidArgument(cat("notify_ipc_buffer(peer ", peer, ", buffer ", buf_id, "): version must be > 0"));
  Peer& P = *peers_[peer];
  std::lock_guard<std::mutex> g(P.pub_mu);
  auto it = P.pubs.find(buf_id);
  if (it != P.pubs.end()) {
    LocalPublication& cur = it->second;
    if (cur.version == version && cur.ptr == ptr && cur.len == len) return;  // same triple: no-op
    if (version < cur.version)
      throw InvalidArgument(cat("notify_ipc_buffer(peer ", peer, ", buffer ", buf_id, "): stale version ", version,
                                "; version ", cur.version, " is already published"));
    if (version == cur.version)
      throw InvalidArgument(cat("notify_ipc_buffer(peer ", peer, ", buffer ", buf_id, "): version ", version,
                                " is already published with a different pointer/length (", static_cast<void*>(cur.ptr),
                                ", ", cur.len, " bytes); publish a new version"));
  }
  Publication pub;
  pub.buf_id = buf_id;
  pub.version = version;
  pub.len = len;
  pub.handle = ipc_->export_range(ptr, len, &pub.offset);  // validates memory; may throw
  RegSlot* slot = it != P.pubs.end() ? it->second.slot : registry_slot_for_write(P.in.reg, buf_id);
  if (!slot)
    throw InvalidArgument(cat("notify_ipc_buffer(peer ", peer, ", buffer ", buf_id, "): registry full (", kRegSlots,
                              " buffer ids per peer)"));
  registry_write(slot, pub);
  P.pubs[buf_id] = LocalPublication{static_cast<char*>(ptr), len, version, slot, pub};
}

void Transport::wait_buffer(int peer, uint32_t buf_id, uint64_t min_version) {
  rethrow_worker_error();
  if (min_version == 0)
    throw InvalidArgument(cat("wait_ipc_buffer(peer ", peer, ", buffer ", buf_id, "): min_version must be > 0"));
  Publication pub = wait_publication(peer, buf_id, min_version, "wait_ipc_buffer");
  if (peers_[peer]->path == Path::Direct) ipc_->bind(peer, pub);  // the first send pays nothing
}

Request Transport::irecv(int peer, uint32_t buf_id, size_t offset, size_t len) {
  rethrow_worker_error();
  check_peer(peer);
  Peer& P = *peers_[peer];
  if (offset > SIZE_MAX - len)
    throw InvalidArgument(cat("irecv from rank ", peer, ": offset ", offset, " + len ", len, " overflows"));
  {
    std::lock_guard<std::mutex> g(P.pub_mu);
    auto it = P.pubs.find(buf_id);
    if (it == P.pubs.end())
      throw InvalidArgument(cat("irecv from rank ", peer, ": unknown buffer id ", buf_id,
                                " (publish it with notify_ipc_buffer first)"));
    if (offset + len > it->second.len)
      throw InvalidArgument(cat("irecv from rank ", peer, ": [offset ", offset, ", +len ", len, ") exceeds buffer ",
                                buf_id, " of ", it->second.len, " bytes"));
  }
  RecvOp r;
  r.buf_id = buf_id;
  r.offset = offset;
  r.len = len;
  std::lock_guard<std::mutex> g(P.recv_mu);
  r.seq = ++P.next_recv_seq;
  r.req = new_request("irecv from", peer, buf_id, offset, len, 0, r.seq);
  P.recvs.push_back(r);
  Request out(r.req);
  wake_recv_worker();
  return out;
}

bool Transport::progress_recvs(Peer& P) {
  bool moved = false;
  shm::RingMsg m;
  while (P.in.msg.pop(&m)) {
    moved = true;
    if (m.type == kMsgRts) P.rts[m.seq] = m;
    else if (m.type == kMsgSendDone) P.arrived[m.seq] = m;
    else throw Error(cat("unexpected message type ", m.type, " on the ring from rank ", P.rank));
  }
  // Legacy handshake: answer each RTS once its irecv is posted.
  for (auto it = P.rts.begin(); it != P.rts.end();) {
    const shm::RingMsg& q = it->second;
    if (P.recvs.empty() || q.seq < P.recvs.front().seq || q.seq > P.recvs.back().seq) { ++it; continue; }
    RecvOp& r = P.recvs[q.seq - P.recvs.front().seq];
    shm::RingMsg reply{kMsgCts, q.buf_id, q.seq, 0, 0, 0, kStatusOk, 0, 0};
    if (!same_range(r, q.buf_id, q.offset, q.len)) {
      reply.arg0 = kStatusMismatch;
    } else {
      std::lock_guard<std::mutex> g(P.pub_mu);
      auto pub = P.pubs.find(q.buf_id);
      if (pub == P.pubs.end()) reply.arg0 = kStatusUnknownBuffer;
      else if (q.offset + q.len > pub->second.len) reply.arg0 = kStatusBounds;
      else reply.version = pub->second.version;
    }
    if (!P.in.ack.push(reply)) break;
    boot_->layout().send_bell[P.rank].ring();
    if (reply.arg0 != kStatusOk && !r.finished) {
      r.req->fail(mismatch(r, P.rank, q.buf_id, q.offset, q.len));
      r.finished = true;
    }
    it = P.rts.erase(it);
    moved = true;
  }
  if (P.path == Path::Direct && P.completion == Completion::DoneSeq) {
    uint64_t done = P.done_in->value.load(std::memory_order_acquire);
    uint64_t consumed = 0;
    while (!P.recvs.empty() && P.recvs.front().seq <= done) {
      RecvOp& r = P.recvs.front();
      const Desc& d = P.in.desc[r.seq % kDescSlots];
      if (d.seq.load(std::memory_order_acquire) != r.seq)
        throw Error(cat("descriptor of message ", r.seq, " from rank ", P.rank, " is missing (found ", d.seq.load(), ")"));
      if (!r.finished) {
        if (d.status != kStatusOk)
          r.req->fail(std::make_exception_ptr(InvalidArgument(cat(r.req->what(), ": the legacy send was rejected"))));
        else if (!same_range(r, d.buf_id, d.offset, d.len))
          r.req->fail(mismatch(r, P.rank, d.buf_id, d.offset, d.len));
        else
          r.req->complete();
      }
      consumed = r.seq;
      P.recvs.pop_front();
      moved = true;
    }
    if (consumed) {
      P.in.consumed->value.store(consumed, std::memory_order_release);  // descriptor credit
      boot_->layout().send_bell[P.rank].ring();
    }
    return moved;
  }
  // Ring completion (and relay arrivals): match in order, ACK each on the ring.
  while (!P.recvs.empty()) {
    RecvOp& r = P.recvs.front();
    auto it = P.arrived.find(r.seq);
    if (it == P.arrived.end()) break;
    const shm::RingMsg& a = it->second;
    uint64_t status = kStatusOk;
    if (a.arg0 != kStatusOk) status = a.arg0;
    else if (!same_range(r, a.buf_id, a.offset, a.len)) status = kStatusMismatch;
    if (P.path == Path::Direct) {
      shm::RingMsg ack{kMsgAck, a.buf_id, a.seq, 0, 0, 0, status, 0, 0};
      if (!P.in.ack.push(ack)) break;
      boot_->layout().send_bell[P.rank].ring();
    }
    if (!r.finished) {
      if (status == kStatusMismatch) r.req->fail(mismatch(r, P.rank, a.buf_id, a.offset, a.len));
      else if (status != kStatusOk)
        r.req->fail(std::make_exception_ptr(InvalidArgument(cat(r.req->what(), ": the message could not land (status ", status, ")"))));
      else r.req->complete();
    }
    P.arrived.erase(it);
    P.recvs.pop_front();
    moved = true;
  }
  return moved;
}

bool Transport::progress_relay_recv(Peer& P) {
  bool moved = false;
  RelayView& R = P.relay_in;
  uint64_t produced = R.hdr->produced.value.load(std::memory_order_acquire);
  while (P.relay_next_drain < produced && P.relay_draining.size() < R.slots) {
    uint64_t idx = P.relay_next_drain++;
    RelayChunk c;
    c.index = idx;
    c.meta = R.hdr->meta[idx % R.slots];  // copy first: validate what we use
    const RelaySlotMeta& m = c.meta;
    bool ok = m.bytes <= R.chunk && m.msg_offset <= m.msg_len && m.bytes <= m.msg_len - m.msg_offset;
    char* dst = nullptr;
    if (ok) {
      std::lock_guard<std::mutex> g(P.pub_mu);
      auto pub = P.pubs.find(m.buf_id);
      ok = pub != P.pubs.end() && (m.version == 0 || m.version == pub->second.version) &&
           m.dst_offset <= pub->second.len && m.msg_len <= pub->second.len - m.dst_offset;
      if (ok) dst = pub->second.ptr + m.dst_offset + m.msg_offset;
    }
    c.error = !ok;
    c.ticket = (ok && m.bytes) ? P.recv_queue->copy(dst, R.slot_data(idx), m.bytes, false) : 0;
    P.relay_draining.push_back(c);
    moved = true;
  }
  uint64_t freed = 0;
  while (!P.relay_draining.empty() && P.recv_queue->done(P.relay_draining.front().ticket)) {
    RelayChunk& c = P.relay_draining.front();
    if (c.error) P.relay_failed[c.meta.seq] = true;
    if (c.meta.last) {
      bool failed = P.relay_failed.erase(c.meta.seq) > 0;
      shm::RingMsg a{kMsgSendDone, c.meta.buf_id, c.meta.seq, c.meta.dst_offset, c.meta.msg_len, c.meta.version,
                     failed ? kStatusBounds : kStatusOk, 0, 0};
      P.arrived[c.meta.seq] = a;
    }
    freed = c.index + 1;
    P.relay_draining.pop_front();
    moved = true;
  }
  if (freed) {
    R.hdr->consumed.value.store(freed, std::memory_order_release);
    boot_->layout().send_bell[P.rank].ring();
  }
  return moved;
}

void Transport::fail_pending_recvs(Peer& P, std::exception_ptr e) {
  std::lock_guard<std::mutex> g(P.recv_mu);
  for (auto& r : P.recvs)
    if (!r.finished) r.req->fail(e);
  P.recvs.clear();
}

void Transport::recv_worker_main() {
  backend_->bind_worker_thread();  // the copy hot path makes no device call (gpu/backend.h)
  WorkerLoop loop(boot_->layout().recv_bell[rank_]);
  while (running_.load(std::memory_order_acquire)) {
    uint32_t ticket = loop.prepare();
    bool moved = false, pending = false, busy = false;
    bool sweep = loop.sweep_due();
    for (auto& pp : peers_) {
      if (!pp) continue;
      Peer& P = *pp;
      if (P.lost.load(std::memory_order_acquire)) {
        try {  // deliver what the peer signalled before it went, then fail the rest
          std::lock_guard<std::mutex> g(P.recv_mu);
          if (P.path == Path::Relay) progress_relay_recv(P);
          progress_recvs(P);
        } catch (...) {
        }
        fail_pending_recvs(P, P.lost_error);
        continue;
      }
      try {
        std::lock_guard<std::mutex> g(P.recv_mu);
        if (P.path == Path::Relay) moved |= progress_relay_recv(P);
        moved |= progress_recvs(P);
        busy |= !P.relay_draining.empty();
        pending |= !P.recvs.empty();
      } catch (...) {
        mark_lost(P, std::current_exception());
      }
    }
    if (sweep && pending) {
      for (auto& pp : peers_) {
        if (!pp || pp->lost.load()) continue;
        bool has;
        {
          std::lock_guard<std::mutex> g(pp->recv_mu);
          has = !pp->recvs.empty();
        }
        if (!has) continue;
        try {
          check_peer(pp->rank);
        } catch (...) {
          // Marked lost: the next round delivers what it signalled, then fails the rest.
        }
      }
    }
    loop.idle(moved, pending, busy && !backend_->is_host(), ticket);
  }
}

}  // namespace peerlink::detail
