// Host backend of the stream engine: runs a batch (one call, or a whole group) synchronously on the
// calling thread as a non-blocking state machine over all its operations, so a group in which
// every rank sends and receives (ring, all pairs) completes whatever the order of the calls.
// Memory order: data and descriptors are written before a release store of the flag, and read
// after an acquire load of it (the GPU kernels do the same at system scope).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "peerlink/errors.h"
#include "stream/stream_p2p.h"
#include "transport/services.h"

namespace peerlink::detail {

using common::cat;
using namespace peerlink::stream;
using Clock = std::chrono::steady_clock;

namespace {

uint64_t load_acquire(const Line& l) { return __atomic_load_n(&l.v, __ATOMIC_ACQUIRE); }
void store_release(Line& l, uint64_t v) { __atomic_store_n(&l.v, v, __ATOMIC_RELEASE); }

const char* kind_name(StreamOpKind k) {
  switch (k) {
    case StreamOpKind::SendPub: return "send (published buffer)";
    case StreamOpKind::RecvPub: return "recv (published buffer)";
    case StreamOpKind::SendRaw: return "send";
    case StreamOpKind::RecvRaw: return "recv";
    case StreamOpKind::LocalCopy: break;  // copied at group_end on the host backend
  }
  return "?";
}

}  // namespace

void StreamEngine::run_host(std::vector<StreamOp>& ops) {
  // Sequence numbers in call order per (peer, channel); the counters live in this rank's area, as
  // they do on GPUs (there the kernels advance them).
  for (StreamOp& op : ops) {
    PairSection* m = mine(op.peer);
    switch (op.kind) {
      case StreamOpKind::SendPub: op.seq = ++m->pub_sent.v; break;
      case StreamOpKind::RecvPub: op.seq = ++m->pub_recvd.v; break;
      case StreamOpKind::SendRaw:
      case StreamOpKind::RecvRaw: {
        bool send = op.kind == StreamOpKind::SendRaw;
        op.seq = ++(send ? m->raw_sent_msgs.v : m->raw_recvd_msgs.v);
        Line& chunks = send ? m->raw_sent_chunks : m->raw_recvd_chunks;
        op.first_chunk = chunks.v;
        op.msg_len = op.len;
        op.nchunks = std::max<uint64_t>(1, (op.len + chunk_ - 1) / chunk_);
        chunks.v += op.nchunks;  // a receiver's drained mismatch corrects this below
        break;
      }
      case StreamOpKind::LocalCopy: break;  // never here: group_end copies them on the host backend
    }
  }

  size_t left = ops.size();
  auto deadline = Clock::now() + comm_.options().timeout;
  auto next_check = Clock::now();
  uint32_t idle = 0;
  // blocked[q * 4 + channel]: an earlier op of that FIFO channel is not done yet.
  std::vector<char> blocked(size_t(world_) * 4);
  size_t begin = 0;  // ops before it are all done (they mostly finish in call order)
  while (left > 0) {
    bool moved = false;
    std::fill(blocked.begin(), blocked.end(), 0);
    while (ops[begin].done) ++begin;
    for (size_t i = begin; i < ops.size(); ++i) {
      StreamOp& op = ops[i];
      if (op.done) continue;
      const int q = op.peer;
      PairSection* m = mine(q);
      PairSection* r = remote_[q];
      char& blk = blocked[size_t(q) * 4 + int(op.kind)];
      switch (op.kind) {
        case StreamOpKind::RecvPub: {
          // Posting may run ahead of completion by the descriptor ring (earlier posts stay in order:
          // a later op is only posted after every earlier one was).
          if (!op.posted && op.seq <= pub_completed_[q] + kDescRing && (blk == 0 || blk == 2)) {
            PostDesc& d = r->post[op.seq % kDescRing];
            d.seq = op.seq;
            d.offset = op.offset;
            d.len = op.len;
            d.buf_id = op.buf_id;
            store_release(r->pub_posted, op.seq);
            op.posted = moved = true;
          }
          if (!op.posted) { blk = 1; break; }
          if (blk || load_acquire(m->pub_ready) < op.seq) { blk = 2; break; }  // 2: posted, not done
          ReadyDesc d = m->ready[op.seq % kDescRing];
          if (d.seq != op.seq)
            throw Error(cat("recv from rank ", q, ": protocol violation: ready descriptor holds message ", d.seq,
                            ", expected ", op.seq));
          if (d.status != kStatusOk)
            op.error = std::make_exception_ptr(InvalidArgument(
                cat("recv from rank ", q, ": message ", op.seq, " expects buffer ", op.buf_id, " offset ", op.offset,
                    " len ", op.len, " but the matching send named buffer ", d.buf_id, " offset ", d.offset, " len ",
                    d.len, "; nothing was written")));
          pub_completed_[q] = op.seq;
          op.done = moved = true;
          --left;
          break;
        }
        case StreamOpKind::SendPub: {
          if (blk || load_acquire(m->pub_posted) < op.seq) { blk = 1; break; }
          PostDesc p = m->post[op.seq % kDescRing];
          if (p.seq != op.seq)
            throw Error(cat("send to rank ", q, ": protocol violation: posted descriptor holds message ", p.seq,
                            ", expected ", op.seq));
          uint32_t status = kStatusOk;
          if (p.buf_id != op.buf_id || p.offset != op.offset || p.len != op.len) {
            status = kStatusMismatch;
            op.error = std::make_exception_ptr(InvalidArgument(
                cat("send to rank ", q, ": message ", op.seq, " names buffer ", op.buf_id, " offset ", op.offset,
                    " len ", op.len, " but the matching recv expects buffer ", p.buf_id, " offset ", p.offset, " len ",
                    p.len, "; nothing was written")));
          } else if (op.len > 0) {
            std::memcpy(op.dst, op.src, op.len);
          }
          ReadyDesc& d = r->ready[op.seq % kDescRing];
          d.seq = op.seq;
          d.offset = op.offset;
          d.len = op.len;
          d.buf_id = op.buf_id;
          d.status = status;
          store_release(r->pub_ready, op.seq);
          op.hold.reset();
          op.done = moved = true;
          --left;
          break;
        }
        case StreamOpKind::SendRaw: {
          if (blk) break;
          while (op.chunks_done < op.nchunks) {
            uint64_t g = op.first_chunk + op.chunks_done;
            if (g + 1 > load_acquire(m->raw_consumed) + slots_) break;  // slot g % slots still full
            size_t slot = g % slots_;
            uint64_t off = op.chunks_done * chunk_;
            uint64_t n = std::min<uint64_t>(chunk_, op.len - std::min<uint64_t>(op.len, off));
            if (n) std::memcpy(staging(r, slot, chunk_), op.src + off, n);
            r->hdr[slot] = ChunkHdr{op.seq, op.len, off, n};
            store_release(r->raw_ready, g + 1);
            ++op.chunks_done;
            moved = true;
          }
          if (op.chunks_done == op.nchunks) {
            op.done = true;
            --left;
          } else {
            blk = 1;
          }
          break;
        }
        case StreamOpKind::RecvRaw: {
          if (blk) break;
          while (op.chunks_done < op.nchunks) {
            uint64_t g = op.first_chunk + op.chunks_done;
            if (load_acquire(m->raw_ready) < g + 1) break;
            size_t slot = g % slots_;
            ChunkHdr h = m->hdr[slot];  // untrusted: validated before use
            uint64_t off = op.chunks_done * chunk_;
            if (op.chunks_done == 0 && h.msg == op.seq && h.msg_len != op.len) {
              // Length mismatch: consume the sender's chunks (its side completes, the channel stays
              // in step) and write nothing here.
              uint64_t theirs = std::max<uint64_t>(1, (h.msg_len + chunk_ - 1) / chunk_);
              mine(q)->raw_recvd_chunks.v += theirs - op.nchunks;
              for (StreamOp& later : ops)
                if (&later != &op && later.kind == StreamOpKind::RecvRaw && later.peer == q && later.seq > op.seq)
                  later.first_chunk += theirs - op.nchunks;
              op.nchunks = theirs;
              op.msg_len = h.msg_len;
              op.drain = true;
              op.error = std::make_exception_ptr(InvalidArgument(
                  cat("recv from rank ", q, ": message ", op.seq, " has ", h.msg_len, " bytes but this recv expects ",
                      op.len, "; nothing was written")));
            }
            uint64_t want = std::min<uint64_t>(chunk_, op.msg_len - std::min<uint64_t>(op.msg_len, off));
            if (h.msg != op.seq || h.msg_len != op.msg_len || h.chunk_off != off || h.chunk_len != want)
              throw Error(cat("recv from rank ", q, ": protocol violation: chunk ", g, " header (message ", h.msg, ", ",
                              h.msg_len, " bytes, offset ", h.chunk_off, ", ", h.chunk_len, " bytes) does not follow message ",
                              op.seq, " of ", op.msg_len, " bytes at offset ", off));
            if (!op.drain && want) std::memcpy(op.dst + off, staging(m, slot, chunk_), want);
            store_release(r->raw_consumed, g + 1);
            ++op.chunks_done;
            moved = true;
          }
          if (op.chunks_done == op.nchunks) {
            op.done = true;
            --left;
          } else {
            blk = 1;
          }
          break;
        }
        case StreamOpKind::LocalCopy: break;
      }
    }
    if (left == 0) break;
    auto now = Clock::now();
    if (moved) {
      deadline = now + comm_.options().timeout;
      idle = 0;
      continue;
    }
    if (now >= next_check) {
      // A dead peer is reported within ~100 ms (check_peer_alive rate-limits itself).
      for (const StreamOp& op : ops)
        if (!op.done) comm_.check_peer_alive(op.peer);
      comm_.check_interrupt();
      next_check = now + std::chrono::milliseconds(5);
    }
    if (now > deadline) {
      for (const StreamOp& op : ops)
        if (!op.done)
          throw TimeoutError(cat(kind_name(op.kind), (op.kind == StreamOpKind::SendPub || op.kind == StreamOpKind::SendRaw)
                                                         ? " to rank " : " from rank ",
                                 op.peer, ": message ", op.seq, " (", op.len, " bytes) made no progress within ",
                                 comm_.options().timeout.count(), " ms",
                                 op.kind == StreamOpKind::SendPub ? " (the matching recv was not posted)" : ""));
    }
    if (++idle < 200) continue;
    if (idle < 2000) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(idle < 20000 ? 20 : 200));
  }
  for (const StreamOp& op : ops)
    if (op.error) std::rethrow_exception(op.error);
}

}  // namespace peerlink::detail
