// Layouts of the transport's SHM segments. Everything a peer wrote is untrusted: readers
// bounds-check indices, lengths and handles before use.
//
//   ctl            (created by rank 0)      doorbells of every rank (the transport's control segment)
//   pair_<s>_<r>   (created by receiver r)  msg ring s->r, ack ring r->s, registry, descriptors,
//                                           posted irecvs
//   ch_<lo>_<hi>   (created by lo)          done_seq lo->hi, done_seq hi->lo, opener_ready
//   relay_<s>_<r>  (created by sender s)    pinned staging ring: slot metadata + chunk data
// Each name is unlinked as soon as every process that maps it has done so (the opener of a pair's
// segment unlinks it right after mapping it), so a crash during setup leaves nothing behind.
// The parsers of these records (validation of untrusted contents) are pure functions in wire.h.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/futex.h"
#include "gpu/backend.h"
#include "shm/spsc_ring.h"

namespace peerlink::detail {

constexpr uint32_t kRegSlots = 1024;     // buffer ids one receiver can publish per sender
constexpr uint32_t kDescSlots = 16384;   // sends in flight before the sender waits for irecvs
constexpr uint32_t kRingCapacity = 2048;
constexpr uint32_t kPostedSlots = 4096;  // posted-irecv records a sender can look up
constexpr int kMaxPeers = 64;            // ranks of one job (bootstrap::kMaxRanks)

// Ring message types.
enum MsgType : uint32_t {
  kMsgRts = 1,       // s->r: version-0 send `seq` wants (buf_id, offset, len)
  kMsgSendDone = 2,  // s->r: send `seq` landed in (buf_id, offset, len) [ring completion]
  kMsgCts = 3,       // r->s: registration for send `seq` (arg0 = status, handle in the registry slot)
  kMsgAck = 4,       // r->s: send `seq` matched (arg0 = status)
};
enum MsgStatus : uint64_t {
  kStatusOk = 0,
  kStatusMismatch = 1,       // the matching irecv names a different (buffer, offset, len)
  kStatusUnknownBuffer = 2,  // the buffer id is not published
  kStatusBounds = 3,         // the range exceeds the published buffer
  kStatusCancelled = 4,      // the sender's call failed and gave the message up (nothing more written)
  kStatusRevoked = 5,        // the buffer was freed while the message was on its way
  kStatusLast = kStatusRevoked,
};

// One published receive buffer. Single writer (the receiver) with a seqlock; readers retry.
enum RegState : uint32_t { kRegEmpty = 0, kRegPublished = 1, kRegRevoked = 2 };
struct RegSlot {
  std::atomic<uint64_t> seq;  // odd while being written
  uint32_t buf_id;
  std::atomic<uint32_t> used;  // RegState; a revoked slot keeps its id (probing) until republished
  uint64_t version;
  uint64_t offset;  // of the buffer inside its allocation
  uint64_t len;
  gpu::MemHandle handle;
};

// Descriptor of send `seq`, written by the sender before it advances done_seq.
struct Desc {
  std::atomic<uint64_t> seq;
  uint32_t buf_id;
  uint32_t status;
  uint64_t offset;
  uint64_t len;
};

// An irecv the receiver has posted, so that a direct sender can refuse a mismatching send before
// any byte moves. Written by the receiver at irecv() (seq last, release; seq 0 while
// rewritten), read by the sender for its own seq only; slot = seq % kPostedSlots.
struct PostedRecv {
  std::atomic<uint64_t> seq;
  uint32_t buf_id;
  uint32_t pad;
  uint64_t offset;
  uint64_t len;
};

// Whether the other side of a pair has a thread waiting on it right now (PairView's *_waiting):
// then what was just published goes to that thread (it polls, or sleeps on its rank's wait bell),
// not to the side's worker. A read-modify-write, not a load: it is ordered after the publication
// made just before it against the waiter's decrement, so either this sees the waiter, or the
// waiter's last poll after its decrement sees the publication. A peer that lies here only delays
// its own completions.
inline bool peer_waiting(shm::PaddedCounter* c) { return c->value.fetch_add(0, std::memory_order_seq_cst) != 0; }

// The pair segment (s -> r). Header lines: consumed (r: descriptor credit), credit_wanted (s: it
// waits for credit; r rings s's send bell only then), recv_waiting (r: threads waiting on irecvs
// from s that complete arrivals themselves), send_waiting (s: threads waiting on sends to r that
// take the replies themselves).
struct PairView {
  shm::PaddedCounter* consumed = nullptr;  // receiver: highest seq whose descriptor it consumed
  shm::PaddedCounter* credit_wanted = nullptr;
  shm::PaddedCounter* recv_waiting = nullptr;
  shm::PaddedCounter* send_waiting = nullptr;
  shm::SpscRing msg;                       // s->r
  shm::SpscRing ack;                       // r->s
  RegSlot* reg = nullptr;
  Desc* desc = nullptr;
  PostedRecv* posted = nullptr;

  static constexpr size_t kHeaderLines = 4;
  static size_t bytes() {
    return kHeaderLines * 64 + 2 * shm::SpscRing::bytes_for(kRingCapacity) + sizeof(RegSlot) * kRegSlots +
           sizeof(Desc) * kDescSlots + sizeof(PostedRecv) * kPostedSlots;
  }
  static void init(void* mem) {
    char* p = static_cast<char*>(mem) + kHeaderLines * 64;
    shm::SpscRing::init(p, kRingCapacity);
    shm::SpscRing::init(p + shm::SpscRing::bytes_for(kRingCapacity), kRingCapacity);
  }
  static PairView attach(void* mem) {
    PairView v;
    char* p = static_cast<char*>(mem);
    v.consumed = reinterpret_cast<shm::PaddedCounter*>(p);
    v.credit_wanted = v.consumed + 1;
    v.recv_waiting = v.consumed + 2;
    v.send_waiting = v.consumed + 3;
    p += kHeaderLines * 64;
    v.msg = shm::SpscRing(p, kRingCapacity);
    p += shm::SpscRing::bytes_for(kRingCapacity);
    v.ack = shm::SpscRing(p, kRingCapacity);
    p += shm::SpscRing::bytes_for(kRingCapacity);
    v.reg = reinterpret_cast<RegSlot*>(p);
    p += sizeof(RegSlot) * kRegSlots;
    v.desc = reinterpret_cast<Desc*>(p);
    p += sizeof(Desc) * kDescSlots;
    v.posted = reinterpret_cast<PostedRecv*>(p);
    return v;
  }
};

struct ChannelLayout {
  shm::PaddedCounter done_lo_to_hi;
  shm::PaddedCounter done_hi_to_lo;
  shm::PaddedCounter opener_ready;
};

// Completion decisions: the lower rank of each pair decides, all ranks learn them through one
// allgather (a row of kMaxPeers bytes per rank; row lo, column hi).
enum PairDecision : uint8_t { kDecisionPending = 0, kDecisionDoneSeq = 1, kDecisionRing = 2, kDecisionFailed = 3 };

// The transport's control segment: every rank's doorbells. Created by rank 0; each rank counts
// itself in `mapped`, and the one that completes the count unlinks the name.
struct ControlLayout {
  shm::PaddedCounter mapped;
  common::Doorbell recv_bell[kMaxPeers];  // rung when something arrives for rank r's receive side
  common::Doorbell send_bell[kMaxPeers];  // rung when something arrives for rank r's send side
  // Rung for rank r's threads waiting on requests themselves (PairView's *_waiting): a publication
  // wakes the waiter directly, and not the worker (its wake-up took the CPU both ranks needed).
  common::Doorbell wait_bell[kMaxPeers];
  // CPU + 1 that rank r's last sending or waiting thread ran on (0: not known yet). A hint for
  // how long a waiter spins (caller_progress.h); nothing that must hold depends on it.
  shm::PaddedCounter cpu[kMaxPeers];
};

struct RelaySlotMeta {
  uint64_t seq;        // message sequence number
  uint64_t msg_offset; // offset of this chunk inside the message
  uint64_t bytes;      // bytes in this chunk
  uint64_t msg_len;    // whole message
  uint64_t dst_offset; // offset inside the published buffer
  uint64_t version;    // 0 = receiver's current registration
  uint32_t buf_id;
  uint32_t last;       // 1 on the message's final chunk
  uint32_t status;     // MsgStatus: kStatusCancelled on the (empty) final chunk of a given-up message
  uint32_t pad;
};

struct RelayHeader {
  shm::PaddedCounter produced;  // chunks published by the sender
  shm::PaddedCounter consumed;  // chunks copied out by the receiver
  uint64_t slots;
  uint64_t chunk_bytes;
  char pad[48];
  RelaySlotMeta meta[64];
};

struct RelayView {
  RelayHeader* hdr = nullptr;
  char* data = nullptr;
  uint64_t slots = 0;
  uint64_t chunk = 0;
  static size_t data_offset() { return (sizeof(RelayHeader) + 4095) & ~size_t(4095); }
  static size_t bytes(uint64_t slots, uint64_t chunk) { return data_offset() + slots * chunk; }
  char* slot_data(uint64_t i) const { return data + (i % slots) * chunk; }
};

}  // namespace peerlink::detail
