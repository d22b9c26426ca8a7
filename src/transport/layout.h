// Layouts of the transport's SHM segments. Everything a peer wrote is untrusted: readers
// bounds-check indices, lengths and handles before use.
//
//   pair_<s>_<r>   (created by receiver r)  msg ring s->r, ack ring r->s, registry, descriptors
//   ch_<lo>_<hi>   (created by lo)          done_seq lo->hi, done_seq hi->lo, opener_ready
//   relay_<s>_<r>  (created by sender s)    pinned staging ring: slot metadata + chunk data
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "gpu/backend.h"
#include "shm/spsc_ring.h"

namespace peerlink::detail {

constexpr uint32_t kRegSlots = 1024;     // buffer ids one receiver can publish per sender
constexpr uint32_t kDescSlots = 16384;   // sends in flight before the sender waits for irecvs
constexpr uint32_t kRingCapacity = 2048;

// Ring message types.
enum MsgType : uint32_t {
  kMsgRts = 1,       // s->r: version-0 send `seq` wants (buf_id, offset, len)
  kMsgSendDone = 2,  // s->r: send `seq` landed in (buf_id, offset, len) [ring completion]
  kMsgCts = 3,       // r->s: registration for send `seq` (arg0 = status, handle in the registry slot)
  kMsgAck = 4,       // r->s: send `seq` matched (arg0 = status)
};
enum MsgStatus : uint64_t { kStatusOk = 0, kStatusMismatch = 1, kStatusUnknownBuffer = 2, kStatusBounds = 3 };

// One published receive buffer. Single writer (the receiver) with a seqlock; readers retry.
struct RegSlot {
  std::atomic<uint64_t> seq;  // odd while being written
  uint32_t buf_id;
  std::atomic<uint32_t> used;
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

struct PairView {
  shm::PaddedCounter* consumed = nullptr;  // receiver: highest seq whose descriptor it consumed
  shm::SpscRing msg;                       // s->r
  shm::SpscRing ack;                       // r->s
  RegSlot* reg = nullptr;
  Desc* desc = nullptr;

  static size_t bytes() {
    return 64 + 2 * shm::SpscRing::bytes_for(kRingCapacity) + sizeof(RegSlot) * kRegSlots + sizeof(Desc) * kDescSlots;
  }
  static void init(void* mem) {
    char* p = static_cast<char*>(mem) + 64;
    shm::SpscRing::init(p, kRingCapacity);
    shm::SpscRing::init(p + shm::SpscRing::bytes_for(kRingCapacity), kRingCapacity);
  }
  static PairView attach(void* mem) {
    PairView v;
    char* p = static_cast<char*>(mem);
    v.consumed = reinterpret_cast<shm::PaddedCounter*>(p);
    p += 64;
    v.msg = shm::SpscRing(p, kRingCapacity);
    p += shm::SpscRing::bytes_for(kRingCapacity);
    v.ack = shm::SpscRing(p, kRingCapacity);
    p += shm::SpscRing::bytes_for(kRingCapacity);
    v.reg = reinterpret_cast<RegSlot*>(p);
    p += sizeof(RegSlot) * kRegSlots;
    v.desc = reinterpret_cast<Desc*>(p);
    return v;
  }
};

struct ChannelLayout {
  shm::PaddedCounter done_lo_to_hi;
  shm::PaddedCounter done_hi_to_lo;
  shm::PaddedCounter opener_ready;
};

// Pair decisions published by the lower rank in the rendezvous segment.
enum PairDecision : uint32_t { kDecisionPending = 0, kDecisionDoneSeq = 1, kDecisionRing = 2, kDecisionFailed = 3 };

struct RelaySlotMeta {
  uint64_t seq;        // message sequence number
  uint64_t msg_offset; // offset of this chunk inside the message
  uint64_t bytes;      // bytes in this chunk
  uint64_t msg_len;    // whole message
  uint64_t dst_offset; // offset inside the published buffer
  uint64_t version;    // 0 = receiver's current registration
  uint32_t buf_id;
  uint32_t last;       // 1 on the message's final chunk
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
