// Single-producer single-consumer ring of fixed 64-byte messages in shared memory. The producer and
// consumer indices sit on their own cache lines. The consumer treats the indices as untrusted (a
// corrupted or hostile peer) and throws instead of reading outside the ring.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "peerlink/errors.h"

namespace peerlink::shm {

struct alignas(64) PaddedCounter {
  std::atomic<uint64_t> value;
  char pad[56];
};
static_assert(sizeof(PaddedCounter) == 64, "PaddedCounter fills a cache line");

struct RingMsg {
  uint32_t type;
  uint32_t buf_id;
  uint64_t seq;
  uint64_t offset;
  uint64_t len;
  uint64_t version;
  uint64_t arg0;
  uint64_t arg1;
  uint64_t arg2;
};
static_assert(sizeof(RingMsg) == 64, "RingMsg is one cache line");

struct RingHeader {
  PaddedCounter tail;  // written by the producer: messages pushed
  PaddedCounter head;  // written by the consumer: messages popped
  uint64_t capacity;   // power of two, fixed at creation
  char pad[56];
};

class SpscRing {
 public:
  static size_t bytes_for(uint32_t capacity) { return sizeof(RingHeader) + size_t(capacity) * sizeof(RingMsg); }
  // Initialises a ring in zeroed memory (creator only).
  static void init(void* mem, uint32_t capacity) { static_cast<RingHeader*>(mem)->capacity = capacity; }

  SpscRing() = default;
  SpscRing(void* mem, uint32_t expected_capacity)
      : hdr_(static_cast<RingHeader*>(mem)), slots_(reinterpret_cast<RingMsg*>(hdr_ + 1)), cap_(expected_capacity) {
    if (hdr_->capacity != expected_capacity)
      throw Error("SHM ring capacity mismatch: header says " + std::to_string(hdr_->capacity) + ", expected " +
                  std::to_string(expected_capacity));
  }

  bool push(const RingMsg& m) {
    uint64_t t = hdr_->tail.value.load(std::memory_order_relaxed);
    uint64_t h = hdr_->head.value.load(std::memory_order_acquire);
    if (t - h >= cap_) return false;
    std::memcpy(&slots_[t & (cap_ - 1)], &m, sizeof m);
    hdr_->tail.value.store(t + 1, std::memory_order_release);
    return true;
  }

  bool pop(RingMsg* out) {
    uint64_t h = hdr_->head.value.load(std::memory_order_relaxed);
    uint64_t t = hdr_->tail.value.load(std::memory_order_acquire);
    if (t == h) return false;
    if (t - h > cap_)
      throw Error("SHM ring corrupted: producer index " + std::to_string(t) + " is more than " +
                  std::to_string(cap_) + " ahead of consumer index " + std::to_string(h));
    std::memcpy(out, &slots_[h & (cap_ - 1)], sizeof *out);
    hdr_->head.value.store(h + 1, std::memory_order_release);
    return true;
  }

  bool empty() const {
    return hdr_->tail.value.load(std::memory_order_acquire) == hdr_->head.value.load(std::memory_order_relaxed);
  }
  size_t size() const {
    return hdr_->tail.value.load(std::memory_order_acquire) - hdr_->head.value.load(std::memory_order_acquire);
  }
  uint32_t capacity() const { return cap_; }

 private:
  RingHeader* hdr_ = nullptr;
  RingMsg* slots_ = nullptr;
  uint32_t cap_ = 0;
};

}  // namespace peerlink::shm
