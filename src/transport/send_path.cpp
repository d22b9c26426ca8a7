// Send side: isend validation and copy issue (caller thread), and the send worker, which waits for
// copies, publishes completions in order (done_seq + descriptor, or SEND_DONE on the ring), runs the
// legacy RTS/CTS handshake and fills relay staging chunks.
#include <thread>

#include "common/interrupt.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "transport/transport.h"
#include "transport/worker_loop.h"

namespace peerlink::detail {
namespace {
using common::cat;
using Clock = std::chrono::steady_clock;
}  // namespace

std::shared_ptr<RequestState> Transport::new_request(const char* kind, int peer, uint32_t buf_id, uint64_t offset,
                                                     uint64_t len, uint64_t version, uint64_t seq) {
  auto r = std::make_shared<RequestState>();
  r->timeout = opts_.timeout;
  r->kind = kind;
  r->peer = peer;
  r->buf_id = buf_id;
  r->offset = offset;
  r->len = len;
  r->version = version;
  r->seq = seq;
  return r;
}

Publication Transport::wait_publication(int peer, uint32_t buf_id, uint64_t min_version, const char* what) {
  Peer& P = *peers_[peer];
  const auto deadline = Clock::now() + opts_.timeout;
  common::InterruptPoll interrupt(opts_.interrupt_check);  // abandoning this wait changes nothing
  for (int iter = 0;; ++iter) {
    std::optional<Publication> pub = registry_read(P.out.reg, buf_id);
    if (pub && pub->version >= min_version) return *pub;
    check_peer(peer);
    interrupt.poll();
    if (Clock::now() > deadline)
      throw TimeoutError(cat(what, " to rank ", peer, ": buffer ", buf_id, " was not published at version >= ", min_version,
                             " within ", opts_.timeout.count(), " ms (published: ",
                             pub ? cat("version ", pub->version) : std::string("never"), ")"));
    if (iter > 100) std::this_thread::sleep_for(std::chrono::microseconds(iter < 1000 ? 20 : 1000));
  }
}

Request Transport::isend(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset, uint64_t version) {
  rethrow_worker_error();
  check_peer(peer);
  if (!src && len > 0) throw InvalidArgument(cat("isend to rank ", peer, ": src is null (len ", len, ")"));
  if (offset > SIZE_MAX - len)
    throw InvalidArgument(cat("isend to rank ", peer, ": offset ", offset, " + len ", len, " overflows"));
  Peer& P = *peers_[peer];
  auto op = std::make_shared<SendOp>();
  op->src = static_cast<const char*>(src);
  op->len = len;
  op->buf_id = buf_id;
  op->offset = offset;
  op->version = version;
  Binding bind;
  if (version > 0) {
    Publication pub = wait_publication(peer, buf_id, version, "isend");
    if (pub.version > version)
      throw InvalidArgument(cat("isend to rank ", peer, ": stale version ", version, " for buffer ", buf_id,
                                "; the receiver published version ", pub.version));
    if (offset + len > pub.len)
      throw InvalidArgument(cat("isend to rank ", peer, ": [offset ", offset, ", +len ", len, ") exceeds buffer ", buf_id,
                                " of ", pub.len, " bytes (version ", version, ")"));
    if (P.path == Path::Direct) {
      bind = ipc_->bind(peer, pub);
      op->dst = bind.ptr + offset;
      op->map = bind.map;
    }
  }
  std::lock_guard<std::mutex> g(P.send_mu);
  op->seq = ++P.next_send_seq;
  op->req = new_request("isend to", peer, buf_id, offset, len, version, op->seq);
  if (P.path == Path::Relay) {
    op->stage = SendOp::kRelay;
  } else if (version > 0) {
    // Steady state: the copy is issued right here. On GPUs with the done_seq channel, the copy
    // stream also stores done_seq after the copy, so completion needs no CPU hop at all; this is
    // only allowed while every earlier op is signalled the same way (done_seq must never regress).
    bool gpu_signal = P.completion == Completion::DoneSeq && P.chan_pinned &&
                      op->seq <= P.out.consumed->value.load(std::memory_order_acquire) + kDescSlots;
    for (auto& prev : P.sends) gpu_signal = gpu_signal && prev->gpu_signal;
    try {
      if (gpu_signal) {
        Desc& d = P.out.desc[op->seq % kDescSlots];
        d.buf_id = op->buf_id;
        d.status = kStatusOk;
        d.offset = op->offset;
        d.len = op->len;
        d.seq.store(op->seq, std::memory_order_release);
      }
      auto* done_word = gpu_signal ? reinterpret_cast<uint64_t*>(&P.done_out->value) : nullptr;
      if (gpu_signal && len > 0 && len <= opts_.kernel_copy_max) {
        // Small: one kernel copies and stores done_seq (the copy engine's start-up costs more).
        if (!P.send_queue->copy_and_signal(op->dst, op->src, len, done_word, op->seq))
          throw Error("copy queue cannot run the signalling copy kernel");
      } else {
        op->ticket = P.send_queue->copy(op->dst, op->src, len, len >= opts_.stripe_threshold, !gpu_signal);
        if (gpu_signal && !P.send_queue->signal_after(done_word, op->seq))
          throw Error("copy queue cannot signal done_seq");
      }
    } catch (...) {
      --P.next_send_seq;  // nothing was signalled: the sequence number is not consumed
      throw;
    }
    op->gpu_signal = gpu_signal;
    op->signaled = gpu_signal;
    // Completion of a GPU-signalled op is done_seq itself: no event to poll.
    op->stage = gpu_signal ? SendOp::kCopied : SendOp::kCopying;
  }
  P.sends.push_back(op);
  wake_send_worker();
  return Request(op->req);
}

void Transport::drain_acks(Peer& P) {
  shm::RingMsg m;
  while (P.out.ack.pop(&m)) {
    if (m.seq == 0 || m.seq > P.next_send_seq) {
      throw Error(cat("rank ", P.rank, " sent a reply for message ", m.seq, ", but only ", P.next_send_seq,
                      " were sent (corrupted ring)"));
    }
    if (m.type == kMsgCts) P.cts[m.seq] = m;
    else if (m.type == kMsgAck) {
      P.acked_seq = std::max(P.acked_seq, m.seq);
      if (m.arg0 != kStatusOk) P.ack_status[m.seq] = m.arg0;
    } else {
      throw Error(cat("unexpected message type ", m.type, " on the reply ring from rank ", P.rank));
    }
  }
}

static const char* status_text(uint64_t s) {
  switch (s) {
    case kStatusMismatch: return "its matching irecv names a different (buffer, offset, len)";
    case kStatusUnknownBuffer: return "the buffer id is not published";
    case kStatusBounds: return "the range exceeds the published buffer";
    default: return "unknown status";
  }
}

// Progress of a direct pair. Returns true when anything moved.
bool Transport::progress_sends(Peer& P) {
  bool moved = false;
  drain_acks(P);
  for (auto& op : P.sends) {
    if (op->stage == SendOp::kNew) {  // legacy: ask the receiver for its registration
      shm::RingMsg m{kMsgRts, op->buf_id, op->seq, op->offset, op->len, 0, 0, 0, 0};
      if (!P.out.msg.push(m)) break;
      boot_->layout().recv_bell[P.rank].ring();
      op->stage = SendOp::kAwaitCts;
      moved = true;
    }
    if (op->stage == SendOp::kAwaitCts) {
      auto it = P.cts.find(op->seq);
      if (it == P.cts.end()) continue;
      shm::RingMsg cts = it->second;
      P.cts.erase(it);
      moved = true;
      if (cts.arg0 != kStatusOk) {
        op->status = static_cast<uint32_t>(cts.arg0);
        op->stage = SendOp::kCopied;
        continue;
      }
      std::optional<Publication> pub = registry_read(P.out.reg, op->buf_id);
      if (!pub || pub->version < cts.version || op->offset + op->len > pub->len) {
        op->status = kStatusBounds;
        op->stage = SendOp::kCopied;
        continue;
      }
      Binding b = ipc_->bind(P.rank, *pub);
      op->dst = b.ptr + op->offset;
      op->map = b.map;
      op->ticket = P.send_queue->copy(op->dst, op->src, op->len, op->len >= opts_.stripe_threshold);
      op->stage = SendOp::kCopying;
    }
    if (op->stage == SendOp::kCopying && P.send_queue->done(op->ticket)) {
      op->stage = SendOp::kCopied;
      op->map.reset();  // the copy is done: a replaced mapping may close now
      moved = true;
    }
  }
  // Publish completions in order.
  uint64_t signal_upto = 0;
  for (auto& op : P.sends) {
    if (op->signaled) continue;
    if (op->stage != SendOp::kCopied) break;
    if (P.completion == Completion::DoneSeq) {
      if (op->seq > P.out.consumed->value.load(std::memory_order_acquire) + kDescSlots) break;  // no credit
      Desc& d = P.out.desc[op->seq % kDescSlots];
      d.buf_id = op->buf_id;
      d.status = op->status;
      d.offset = op->offset;
      d.len = op->len;
      d.seq.store(op->seq, std::memory_order_release);
      signal_upto = op->seq;
    } else {
      shm::RingMsg m{kMsgSendDone, op->buf_id, op->seq, op->offset, op->len, op->version, op->status, 0, 0};
      if (!P.out.msg.push(m)) break;
      op->stage = SendOp::kAwaitAck;
      signal_upto = op->seq;
    }
    op->signaled = true;
    moved = true;
  }
  if (signal_upto) {
    if (P.completion == Completion::DoneSeq) P.done_out->value.store(signal_upto, std::memory_order_release);
    boot_->layout().recv_bell[P.rank].ring();
  }
  // Retire from the front.
  bool gpu_retired = false;
  while (!P.sends.empty()) {
    auto& op = P.sends.front();
    if (!op->signaled) break;
    if (P.completion == Completion::Ring) {
      if (P.acked_seq < op->seq) break;  // ring: complete on the receiver's ACK
      auto st = P.ack_status.find(op->seq);
      if (st != P.ack_status.end()) op->status = static_cast<uint32_t>(st->second), P.ack_status.erase(st);
      sends_ring.fetch_add(1, std::memory_order_relaxed);
    } else {
      if (op->gpu_signal) {
        if (P.done_out->value.load(std::memory_order_acquire) < op->seq) break;
        gpu_retired = true;
      }
      op->map.reset();
      sends_done_seq.fetch_add(1, std::memory_order_relaxed);
    }
    if (op->status != kStatusOk)
      op->req->fail(std::make_exception_ptr(InvalidArgument(cat(op->req->what(), ": rank ", P.rank, " rejected it: ",
                                                                 status_text(op->status)))));
    else
      op->req->complete();
    P.sends.pop_front();
    moved = true;
  }
  // The copy stream stored done_seq without waking anyone: a receiver that went to sleep on its
  // doorbell hears it from here (a no-op store when nobody sleeps).
  if (gpu_retired) boot_->layout().recv_bell[P.rank].ring();
  return moved;
}

bool Transport::progress_relay_send(Peer& P) {
  bool moved = false;
  RelayView& R = P.relay_out;
  // Fill free staging chunks from the oldest unfinished message(s), strictly in order.
  for (auto& op : P.sends) {
    if (op->signaled) continue;  // every chunk of it is issued
    while (R.hdr->consumed.value.load(std::memory_order_acquire) + R.slots > P.relay_next_chunk) {
      uint64_t idx = P.relay_next_chunk++;
      size_t n = std::min<size_t>(R.chunk, op->len - op->relay_issued);
      RelaySlotMeta& m = R.hdr->meta[idx % R.slots];
      m.seq = op->seq;
      m.msg_offset = op->relay_issued;
      m.bytes = n;
      m.msg_len = op->len;
      m.dst_offset = op->offset;
      m.version = op->version;
      m.buf_id = op->buf_id;
      m.last = op->relay_issued + n >= op->len ? 1 : 0;
      RelayChunk c;
      c.index = idx;
      c.ticket = n ? P.send_queue->copy(R.slot_data(idx), op->src + op->relay_issued, n, false) : 0;
      c.op = op;
      P.relay_filling.push_back(c);
      op->relay_issued += n;
      moved = true;
      if (m.last) {
        op->signaled = true;  // every chunk is issued
        break;
      }
    }
    if (!op->signaled) break;  // staging full: later messages wait
  }
  // Publish filled chunks in order; a message completes when its last chunk is published.
  uint64_t published = 0;
  while (!P.relay_filling.empty() && P.send_queue->done(P.relay_filling.front().ticket)) {
    RelayChunk c = P.relay_filling.front();
    P.relay_filling.pop_front();
    published = c.index + 1;
    if (R.hdr->meta[c.index % R.slots].last) {
      c.op->stage = SendOp::kCopied;
    }
    moved = true;
  }
  if (published) {
    R.hdr->produced.value.store(published, std::memory_order_release);
    boot_->layout().recv_bell[P.rank].ring();
  }
  while (!P.sends.empty() && P.sends.front()->stage == SendOp::kCopied) {
    P.sends.front()->req->complete();
    sends_relay.fetch_add(1, std::memory_order_relaxed);
    P.sends.pop_front();
  }
  return moved;
}

void Transport::fail_pending_sends(Peer& P, std::exception_ptr e) {
  std::lock_guard<std::mutex> g(P.send_mu);
  for (auto& op : P.sends) op->req->fail(e);
  P.sends.clear();
  P.relay_filling.clear();
  P.cts.clear();
}

void Transport::send_worker_main() {
  backend_->bind_worker_thread();  // the copy hot path makes no device call (gpu/backend.h)
  WorkerLoop loop(boot_->layout().send_bell[rank_]);
  while (running_.load(std::memory_order_acquire)) {
    uint32_t ticket = loop.prepare();
    bool moved = false, pending = false, busy = false;
    for (auto& pp : peers_) {
      if (!pp) continue;
      Peer& P = *pp;
      if (P.lost.load(std::memory_order_acquire)) {
        fail_pending_sends(P, P.lost_error);
        continue;
      }
      try {
        std::lock_guard<std::mutex> g(P.send_mu);
        if (P.sends.empty() && P.relay_filling.empty()) {
          if (!P.out.ack.empty()) drain_acks(P);
          continue;
        }
        pending = true;
        moved |= P.path == Path::Relay ? progress_relay_send(P) : progress_sends(P);
        for (auto& op : P.sends) busy |= op->stage == SendOp::kCopying || op->gpu_signal;
        busy |= !P.relay_filling.empty();
      } catch (...) {
        mark_lost(P, std::current_exception());
      }
    }
    if (pending && loop.sweep_due()) {
      for (auto& pp : peers_)
        if (pp && !pp->lost.load()) {
          bool has;
          {
            std::lock_guard<std::mutex> g(pp->send_mu);
            has = !pp->sends.empty();
          }
          if (has) {
            try {
              check_peer(pp->rank);
            } catch (...) {
            }
          }
        }
    }
    loop.idle(moved, pending, busy && !backend_->is_host(), ticket);
  }
}

}  // namespace peerlink::detail
