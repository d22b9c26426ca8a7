// Host runner of the stream engine (stream_runner.h): runs a batch (one call, or a whole group)
// synchronously on the calling thread as a non-blocking state machine over all its operations, so a
// group in which every rank sends and receives (ring, all pairs) completes whatever the order of the
// calls. One step function per channel kind; each moves what it can without waiting.
// Memory order: data and descriptors are written before a release store of the flag, and read
// after an acquire load of it (the GPU kernels do the same at system scope).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "stream/stream_runner.h"
#include "transport/services.h"

namespace peerlink::detail {

using namespace peerlink::stream;
using Clock = std::chrono::steady_clock;

namespace {

// Small chunks so CI exercises multi-chunk messages and slot reuse with small buffers.
constexpr size_t kHostChunk = 8 << 10, kHostSlots = 8;
static_assert((kHostChunk & (kHostChunk - 1)) == 0 && (kHostSlots & (kHostSlots - 1)) == 0,
              "slots are indexed and chunks counted with masks and shifts, as on GPUs (stream_device.h)");
static_assert(kHostSlots <= size_t(kMaxSlots), "slots");

class HostStreamRunner final : public StreamRunner {
 public:
  explicit HostStreamRunner(StreamState& st);

  void init_area(const AreaHeader& h) override;
  void peer_bound(int, void*, bool) override {}
  void check_peer_path(int, const char*) const override {}  // every pair has its area mapped
  void check_buffer(const void*, size_t, const char*, int) const override {}  // any host memory
  // A peer that closed after its sends completed left their bytes in this rank's own area, and the
  // wait loop reports a lost peer only when nothing is there to take (with the check at the call,
  // such recvs failed in CI although their bytes had arrived).
  bool recv_needs_live_peer() const override { return false; }
  void prepare_raw(StreamOp&) override {}
  void add_self_copy(std::vector<StreamOp>& ops, const StreamOp& send, const StreamOp& recv) override;
  void run(std::vector<StreamOp>& ops) override;
  // Every failure is reported at the call itself: nothing is left for later.
  void check_device_error() override {}
  void rethrow_async_error() const override {}
  void close() noexcept override {}
  int zero_copy_slots_seen(int) const override { return 0; }

 private:
  // A FIFO channel's state in one pass over the batch: its earlier ops all done (Open), one of
  // them stuck (Blocked), or a published recv posted, not done.
  enum class HostChannel : char { Open = 0, Blocked, Posted };
  void number_ops(std::vector<StreamOp>& ops);
  bool recv_pub(StreamOp& op, HostChannel& blk);  // each: whether it moved; op.done when finished
  bool send_pub(StreamOp& op, HostChannel& blk);
  bool send_raw(StreamOp& op, HostChannel& blk);
  bool recv_raw(std::vector<StreamOp>& ops, StreamOp& op, HostChannel& blk);
  void drain_recv(std::vector<StreamOp>& ops, StreamOp& op, uint64_t sender_len);

  StreamState& st_;
};

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

// The batch loop's patience: the deadline moves with every step of progress.
struct HostWait {
  Clock::time_point deadline;
  Clock::time_point next_check;
  uint32_t idle = 0;
};

// After a pass over the batch: resets the deadline when something moved; else checks the peers
// and the deadline, and backs off (spin, yield, then sleep).
void wait_for_progress(CommServices& comm, const std::vector<StreamOp>& ops, HostWait& w, bool moved) {
  auto now = Clock::now();
  if (moved) {
    w.deadline = now + comm.options().timeout;
    w.idle = 0;
    return;
  }
  if (now >= w.next_check) {
    // A dead peer is reported within ~100 ms (check_peer_alive rate-limits itself).
    for (const StreamOp& op : ops)
      if (!op.done) comm.check_peer_alive(op.peer);
    comm.check_interrupt();
    w.next_check = now + std::chrono::milliseconds(5);
  }
  if (now > w.deadline) {
    for (const StreamOp& op : ops)
      if (!op.done)
        throw TimeoutError(common::format(
            "{}{}{}: message {} ({} bytes) made no progress within {} ms{}", kind_name(op.kind),
            (op.kind == StreamOpKind::SendPub || op.kind == StreamOpKind::SendRaw) ? " to rank " : " from rank ",
            op.peer, op.seq, op.len, comm.options().timeout.count(),
            op.kind == StreamOpKind::SendPub ? " (the matching recv was not posted)" : ""));
  }
  if (++w.idle < 200) return;
  if (w.idle < 2000) std::this_thread::yield();
  else std::this_thread::sleep_for(std::chrono::microseconds(w.idle < 20000 ? 20 : 200));
}

HostStreamRunner::HostStreamRunner(StreamState& st) : st_(st) {
  st.slots = kHostSlots;
  st.chunk = kHostChunk;
  st.sec_bytes = section_bytes(st.slots, st.chunk, false, 0);
  st.area_len = area_bytes(st.world, st.slots, st.chunk, false, 0);
}

void HostStreamRunner::init_area(const AreaHeader& h) {
  std::memset(st_.area, 0, st_.area_len);  // counters start at 0 (flags need no reset later)
  std::memcpy(st_.area, &h, sizeof h);
}

void HostStreamRunner::add_self_copy(std::vector<StreamOp>&, const StreamOp& send, const StreamOp& recv) {
  std::memmove(recv.dst, send.src, send.len);
}

void HostStreamRunner::run(std::vector<StreamOp>& ops) {
  number_ops(ops);
  size_t left = ops.size();
  HostWait wait{Clock::now() + st_.comm.options().timeout, Clock::now()};
  // blocked[q * 4 + channel]: the state of that FIFO channel's earlier ops in this pass.
  std::vector<HostChannel> blocked(size_t(st_.world) * 4);
  size_t begin = 0;  // ops before it are all done (they mostly finish in call order)
  while (left > 0) {
    bool moved = false;
    std::fill(blocked.begin(), blocked.end(), HostChannel::Open);
    while (ops[begin].done) ++begin;
    for (size_t i = begin; i < ops.size(); ++i) {
      StreamOp& op = ops[i];
      if (op.done) continue;
      HostChannel& blk = blocked[size_t(op.peer) * 4 + int(op.kind)];
      switch (op.kind) {
        case StreamOpKind::RecvPub: moved |= recv_pub(op, blk); break;
        case StreamOpKind::SendPub: moved |= send_pub(op, blk); break;
        case StreamOpKind::SendRaw: moved |= send_raw(op, blk); break;
        case StreamOpKind::RecvRaw: moved |= recv_raw(ops, op, blk); break;
        case StreamOpKind::LocalCopy: break;
      }
      if (op.done) --left;
    }
    if (left == 0) break;
    wait_for_progress(st_.comm, ops, wait, moved);
  }
  for (const StreamOp& op : ops)
    if (op.error) std::rethrow_exception(op.error);
}

// Sequence numbers in call order per (peer, channel); the counters live in this rank's area, as
// they do on GPUs (there the kernels advance them).
void HostStreamRunner::number_ops(std::vector<StreamOp>& ops) {
  for (StreamOp& op : ops) {
    PairSection* m = st_.mine(op.peer);
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
        op.nchunks = std::max<uint64_t>(1, (op.len + st_.chunk - 1) / st_.chunk);
        chunks.v += op.nchunks;  // a receiver's drained mismatch corrects this below
        break;
      }
      case StreamOpKind::LocalCopy: break;  // never here: group_end copies them on the host backend
    }
  }
}

bool HostStreamRunner::recv_pub(StreamOp& op, HostChannel& blk) {
  const int q = op.peer;
  PairSection* m = st_.mine(q);
  PairSection* r = st_.remote[q];
  bool moved = false;
  // Posting may run ahead of completion by the descriptor ring (earlier posts stay in order:
  // a later op is only posted after every earlier one was).
  if (!op.posted && op.seq <= st_.pub_completed[q] + kDescRing && blk != HostChannel::Blocked) {
    PostDesc& d = r->post[op.seq % kDescRing];
    d.seq = op.seq;
    d.offset = op.offset;
    d.len = op.len;
    d.buf_id = op.buf_id;
    store_release(r->pub_posted, op.seq);
    op.posted = moved = true;
  }
  if (!op.posted) { blk = HostChannel::Blocked; return moved; }
  if (blk != HostChannel::Open || load_acquire(m->pub_ready) < op.seq) { blk = HostChannel::Posted; return moved; }
  ReadyDesc d = m->ready[op.seq % kDescRing];
  if (d.seq != op.seq)
    throw Error(common::format("recv from rank {}: protocol violation: ready descriptor holds message {}, expected {}",
                               q, d.seq, op.seq));
  if (d.status != kStatusOk)
    op.error = std::make_exception_ptr(
        InvalidArgument(common::format("recv from rank {}: message {} expects buffer {} offset {} len {} but the "
                                       "matching send named buffer {} offset {} len {}; nothing was written",
                                       q, op.seq, op.buf_id, op.offset, op.len, d.buf_id, d.offset, d.len)));
  st_.pub_completed[q] = op.seq;
  op.done = true;
  return true;
}

bool HostStreamRunner::send_pub(StreamOp& op, HostChannel& blk) {
  const int q = op.peer;
  PairSection* m = st_.mine(q);
  PairSection* r = st_.remote[q];
  if (blk != HostChannel::Open || load_acquire(m->pub_posted) < op.seq) { blk = HostChannel::Blocked; return false; }
  PostDesc p = m->post[op.seq % kDescRing];
  if (p.seq != op.seq)
    throw Error(common::format("send to rank {}: protocol violation: posted descriptor holds message {}, expected {}",
                               q, p.seq, op.seq));
  uint32_t status = kStatusOk;
  if (p.buf_id != op.buf_id || p.offset != op.offset || p.len != op.len) {
    status = kStatusMismatch;
    op.error = std::make_exception_ptr(
        InvalidArgument(common::format("send to rank {}: message {} names buffer {} offset {} len {} but the matching "
                                       "recv expects buffer {} offset {} len {}; nothing was written",
                                       q, op.seq, op.buf_id, op.offset, op.len, p.buf_id, p.offset, p.len)));
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
  op.done = true;
  return true;
}

bool HostStreamRunner::send_raw(StreamOp& op, HostChannel& blk) {
  if (blk != HostChannel::Open) return false;
  PairSection* m = st_.mine(op.peer);
  PairSection* r = st_.remote[op.peer];
  bool moved = false;
  while (op.chunks_done < op.nchunks) {
    uint64_t g = op.first_chunk + op.chunks_done;
    if (g + 1 > load_acquire(m->raw_consumed) + st_.slots) break;  // slot g % slots still full
    size_t slot = g % st_.slots;
    uint64_t off = op.chunks_done * st_.chunk;
    uint64_t n = std::min<uint64_t>(st_.chunk, op.len - std::min<uint64_t>(op.len, off));
    if (n) std::memcpy(staging(r, slot, st_.chunk), op.src + off, n);
    r->hdr[slot] = ChunkHdr{op.seq, op.len, off, n};
    store_release(r->raw_ready, g + 1);
    ++op.chunks_done;
    moved = true;
  }
  if (op.chunks_done == op.nchunks) op.done = true;
  else blk = HostChannel::Blocked;
  return moved;
}

bool HostStreamRunner::recv_raw(std::vector<StreamOp>& ops, StreamOp& op, HostChannel& blk) {
  if (blk != HostChannel::Open) return false;
  const int q = op.peer;
  PairSection* m = st_.mine(q);
  PairSection* r = st_.remote[q];
  bool moved = false;
  while (op.chunks_done < op.nchunks) {
    uint64_t g = op.first_chunk + op.chunks_done;
    if (load_acquire(m->raw_ready) < g + 1) break;
    size_t slot = g % st_.slots;
    ChunkHdr h = m->hdr[slot];  // untrusted: validated before use
    uint64_t off = op.chunks_done * st_.chunk;
    if (op.chunks_done == 0 && h.msg == op.seq && h.msg_len != op.len) drain_recv(ops, op, h.msg_len);
    uint64_t want = std::min<uint64_t>(st_.chunk, op.msg_len - std::min<uint64_t>(op.msg_len, off));
    if (h.msg != op.seq || h.msg_len != op.msg_len || h.chunk_off != off || h.chunk_len != want)
      throw Error(
          common::format("recv from rank {}: protocol violation: chunk {} header (message {}, {} bytes, offset {}, {} "
                         "bytes) does not follow message {} of {} bytes at offset {}",
                         q, g, h.msg, h.msg_len, h.chunk_off, h.chunk_len, op.seq, op.msg_len, off));
    if (!op.drain && want) std::memcpy(op.dst + off, staging(m, slot, st_.chunk), want);
    store_release(r->raw_consumed, g + 1);
    ++op.chunks_done;
    moved = true;
  }
  if (op.chunks_done == op.nchunks) op.done = true;
  else blk = HostChannel::Blocked;
  return moved;
}

// Length mismatch: consume the sender's chunks (its side completes, the channel stays in step) and
// write nothing here.
void HostStreamRunner::drain_recv(std::vector<StreamOp>& ops, StreamOp& op, uint64_t sender_len) {
  const int q = op.peer;
  uint64_t theirs = std::max<uint64_t>(1, (sender_len + st_.chunk - 1) / st_.chunk);
  st_.mine(q)->raw_recvd_chunks.v += theirs - op.nchunks;
  for (StreamOp& later : ops)
    if (&later != &op && later.kind == StreamOpKind::RecvRaw && later.peer == q && later.seq > op.seq)
      later.first_chunk += theirs - op.nchunks;
  op.nchunks = theirs;
  op.msg_len = sender_len;
  op.drain = true;
  op.error = std::make_exception_ptr(InvalidArgument(
      common::format("recv from rank {}: message {} has {} bytes but this recv expects {}; nothing was written", q,
                     op.seq, sender_len, op.len)));
}

}  // namespace

std::unique_ptr<StreamRunner> make_host_stream_runner(StreamState& state) {
  return std::make_unique<HostStreamRunner>(state);
}

}  // namespace peerlink::detail
