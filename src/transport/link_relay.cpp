// Relay path: per ordered pair a staging ring of pinned host SHM (created by the sender), chunked
// and pipelined: the sender fills chunk i (device -> host) while the receiver drains chunk i-1
// (host -> device) into the published buffer. Each chunk carries its message's metadata; a message
// completes on the sender when its last chunk is published, and on the receiver when its last
// chunk landed (matched to irecvs in FIFO order, no ACK).
#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "transport/links.h"
#include "transport/wire.h"

namespace peerlink::detail {
namespace {

class RelaySendLink final : public SendLink {
 public:
  RelaySendLink(PairEnv& env, gpu::CopyQueue& q, const RelayView& r) : env_(env), q_(q), R_(r) {}

  void submit(const std::shared_ptr<SendOp>& op) override {
    op->stage = SendOp::kRelay;
    ops_.push_back(op);
  }
  bool pending() const override { return !ops_.empty() || !filling_.empty(); }
  bool busy() const override { return !filling_.empty(); }
  void cancel(SendOp& op) override {
    op.cancelled = true;           // fill() ends the message with an empty failed chunk
    if (op.issued) q_.wait_all();  // chunk copies still reading src: local, they finish
  }
  void fail_all(std::exception_ptr e) override {
    for (auto& op : ops_) op->req->fail(e);
    ops_.clear();
    filling_.clear();
  }

  bool progress() override {
    bool moved = fill();
    // Publish filled chunks in order; a message completes when its last chunk is published.
    uint64_t published = 0;
    while (!filling_.empty() && q_.done(filling_.front().ticket)) {
      Chunk c = filling_.front();
      filling_.pop_front();
      published = c.index + 1;
      if (c.last) c.op->stage = SendOp::kCopied;
      moved = true;
    }
    if (published) {
      R_.hdr->produced.value.store(published, std::memory_order_release);
      env_.peer_recv_bell->ring();
    }
    while (!ops_.empty() && ops_.front()->stage == SendOp::kCopied) {
      SendOp& op = *ops_.front();
      if (op.status != kStatusOk)
        op.req->fail(
            std::make_exception_ptr(InvalidArgument(common::format("{}: {}", op.req->what(), status_text(op.status)))));
      else
        op.req->complete();
      env_.counters->sends_relay.fetch_add(1, std::memory_order_relaxed);
      ops_.pop_front();
      moved = true;
    }
    return moved;
  }

 private:
  using Clock = std::chrono::steady_clock;

  // Fills free staging chunks from the oldest unfinished message(s), strictly in order.
  bool fill() {
    bool moved = false;
    for (auto& op : ops_) {
      if (op->signaled) continue;  // every chunk of it is issued
      while (R_.hdr->consumed.value.load(std::memory_order_acquire) + R_.slots > next_chunk_) {
        uint64_t idx = next_chunk_++;
        // A given-up message ends here with an empty chunk that tells the receiver it failed;
        // nothing more is read from src.
        bool abort = op->cancelled;
        size_t n = abort ? 0 : std::min<size_t>(R_.chunk, op->len - op->relay_issued);
        RelaySlotMeta& m = R_.hdr->meta[idx % R_.slots];
        m.seq = op->seq;
        m.msg_offset = op->relay_issued;
        m.bytes = n;
        m.msg_len = op->len;
        m.dst_offset = op->offset;
        m.version = op->version;
        m.buf_id = op->buf_id;
        m.last = abort || op->relay_issued + n >= op->len ? 1 : 0;
        m.status = abort ? kStatusCancelled : kStatusOk;
        if (abort) op->status = kStatusCancelled;
        Chunk c{idx, n ? q_.copy(R_.slot_data(idx), op->src + op->relay_issued, n, false) : 0, op, m.last != 0};
        op->issued |= n > 0;
        filling_.push_back(c);
        op->relay_issued += n;
        moved = true;
        if (c.last) {
          op->signaled = true;
          break;
        }
      }
      if (!op->signaled) break;  // staging full: later messages wait
    }
    return moved;
  }

  struct Chunk {
    uint64_t index;
    uint64_t ticket;
    std::shared_ptr<SendOp> op;
    bool last;
  };
  PairEnv& env_;
  gpu::CopyQueue& q_;
  RelayView R_;
  std::deque<std::shared_ptr<SendOp>> ops_;
  std::deque<Chunk> filling_;
  uint64_t next_chunk_ = 0;
};

class RelayRecvLink final : public RecvLink {
 public:
  RelayRecvLink(PairEnv& env, Publications& pubs, gpu::CopyQueue& q, const RelayView& r)
      : env_(env), pubs_(pubs), q_(q), R_(r) {}
  bool busy() const override { return !draining_.empty(); }

  bool progress() override {
    bool moved = false;
    uint64_t produced = R_.hdr->produced.value.load(std::memory_order_acquire);
    while (next_drain_ < produced && draining_.size() < R_.slots) {
      uint64_t idx = next_drain_++;
      Chunk c;
      c.index = idx;
      c.meta = R_.hdr->meta[idx % R_.slots];  // copy first: validate what we use
      const RelaySlotMeta& m = c.meta;
      char* dst = nullptr;
      c.status = relay_meta_valid(m, R_.chunk) ? m.status : uint32_t(kStatusBounds);
      if (c.status == kStatusOk) c.status = destination(m, &dst);
      c.ticket = (c.status == kStatusOk && m.bytes) ? q_.copy(dst, R_.slot_data(idx), m.bytes, false) : 0;
      draining_.push_back(c);
      moved = true;
    }
    uint64_t freed = 0;
    while (!draining_.empty() && q_.done(draining_.front().ticket)) {
      Chunk& c = draining_.front();
      if (c.status != kStatusOk) failed_.emplace(c.meta.seq, c.status);  // the first failure wins
      if (c.meta.last) {
        auto f = failed_.find(c.meta.seq);
        uint64_t status = f == failed_.end() ? uint64_t(kStatusOk) : f->second;
        if (f != failed_.end()) failed_.erase(f);
        arrivals_.arrived(shm::RingMsg{kMsgSendDone, c.meta.buf_id, c.meta.seq, c.meta.dst_offset, c.meta.msg_len,
                                       c.meta.version, status, 0, 0});
      }
      freed = c.index + 1;
      draining_.pop_front();
      moved = true;
    }
    if (freed) {
      R_.hdr->consumed.value.store(freed, std::memory_order_release);
      env_.peer_send_bell->ring();
    }
    moved |= arrivals_.match(recvs_, env_, false);
    return moved;
  }

 private:
  struct Chunk {
    uint64_t index = 0;
    uint64_t ticket = 0;
    RelaySlotMeta meta{};  // validated copy of the slot's metadata
    uint32_t status = kStatusOk;
  };

  // Where chunk m lands, or why it cannot: the published buffer bounds it, and where its irecv is
  // already posted, the irecv's range does too (a mismatching message writes nothing).
  uint32_t destination(const RelaySlotMeta& m, char** dst) {
    if (!recvs_.empty() && m.seq >= recvs_.front().seq && m.seq <= recvs_.back().seq) {
      const RecvOp& r = recvs_[m.seq - recvs_.front().seq];
      if (r.buf_id != m.buf_id || r.offset != m.dst_offset || r.len != m.msg_len) return kStatusMismatch;
    }
    std::lock_guard<std::mutex> g(pubs_.mu);
    auto pub = pubs_.by_id.find(m.buf_id);
    if (pub == pubs_.by_id.end()) return kStatusUnknownBuffer;
    const LocalPublication& p = pub->second;
    if (p.revoked) return kStatusRevoked;
    if ((m.version != 0 && m.version != p.version) || m.dst_offset > p.len || m.msg_len > p.len - m.dst_offset)
      return kStatusBounds;
    *dst = p.ptr + m.dst_offset + m.msg_offset;
    return kStatusOk;
  }

  PairEnv& env_;
  Publications& pubs_;
  gpu::CopyQueue& q_;
  RelayView R_;
  std::deque<Chunk> draining_;
  uint64_t next_drain_ = 0;
  std::map<uint64_t, uint32_t> failed_;  // seq -> status of its first chunk that could not land
  ArrivalMatcher arrivals_;
};

}  // namespace

PairLinks make_relay_links(PairEnv& env, Publications& pubs, const LinkResources& res) {
  PairLinks l;
  l.send = std::make_unique<RelaySendLink>(env, *res.send_queue, res.relay_out);
  l.recv = std::make_unique<RelayRecvLink>(env, pubs, *res.recv_queue, res.relay_in);
  return l;
}

}  // namespace peerlink::detail
