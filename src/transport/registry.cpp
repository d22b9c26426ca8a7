#include "transport/registry.h"

#include <cstring>
#include <thread>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::detail {
namespace {

uint32_t home_of(uint32_t buf_id) { return (buf_id * 2654435761u) % kRegSlots; }

// Writes under the slot's seqlock.
template <class F>
void seqlock_write(RegSlot* slot, F&& f) {
  uint64_t s = slot->seq.load(std::memory_order_relaxed);
  slot->seq.store(s + 1, std::memory_order_relaxed);  // odd: writing
  std::atomic_thread_fence(std::memory_order_release);
  f();
  slot->seq.store(s + 2, std::memory_order_release);
}

}  // namespace

RegSlot* registry_slot_for_write(RegSlot* table, uint32_t buf_id) {
  for (uint32_t i = 0; i < kRegSlots; ++i) {
    RegSlot* s = &table[(home_of(buf_id) + i) % kRegSlots];
    if (s->used.load(std::memory_order_acquire) == kRegEmpty) {
      s->buf_id = buf_id;
      return s;  // marked used by registry_write, after its contents are valid
    }
    if (s->buf_id == buf_id) return s;
  }
  return nullptr;
}

void registry_write(RegSlot* slot, const Publication& p) {
  seqlock_write(slot, [&] {
    slot->buf_id = p.buf_id;
    slot->version = p.version;
    slot->offset = p.offset;
    slot->len = p.len;
    std::memcpy(&slot->handle, &p.handle, sizeof p.handle);
    slot->used.store(kRegPublished, std::memory_order_relaxed);
  });
}

void registry_revoke(RegSlot* slot) {
  seqlock_write(slot, [&] { slot->used.store(kRegRevoked, std::memory_order_relaxed); });
}

std::optional<Publication> registry_read(const RegSlot* table, uint32_t buf_id) {
  for (uint32_t i = 0; i < kRegSlots; ++i) {
    const RegSlot* s = &table[(home_of(buf_id) + i) % kRegSlots];
    if (s->used.load(std::memory_order_acquire) == kRegEmpty) return std::nullopt;
    if (s->buf_id != buf_id) continue;
    RegRecord r;
    for (int attempt = 0;; ++attempt) {
      uint64_t a = s->seq.load(std::memory_order_acquire);
      if ((a & 1) == 0) {
        r.buf_id = s->buf_id;
        r.state = s->used.load(std::memory_order_relaxed);
        r.version = s->version;
        r.offset = s->offset;
        r.len = s->len;
        std::memcpy(&r.handle, &s->handle, sizeof r.handle);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (s->seq.load(std::memory_order_relaxed) == a) break;
      }
      if (attempt > 1000) std::this_thread::yield();
      if (attempt > 100000) throw Error(common::format("registry slot of buffer {} never became consistent", buf_id));
    }
    return parse_publication(r, buf_id);  // untrusted: validated before use
  }
  return std::nullopt;
}

void posted_write(PostedRecv* table, uint64_t seq, uint32_t buf_id, uint64_t offset, uint64_t len) {
  PostedRecv& p = table[seq % kPostedSlots];
  p.seq.store(0, std::memory_order_relaxed);  // being rewritten: no sender may take the old fields
  std::atomic_thread_fence(std::memory_order_release);
  p.buf_id = buf_id;
  p.offset = offset;
  p.len = len;
  p.seq.store(seq, std::memory_order_release);
}

std::optional<PostedView> posted_read(const PostedRecv* table, uint64_t seq) {
  const PostedRecv& p = table[seq % kPostedSlots];
  if (p.seq.load(std::memory_order_acquire) != seq) return std::nullopt;
  PostedView v{p.buf_id, p.offset, p.len};
  std::atomic_thread_fence(std::memory_order_acquire);
  if (p.seq.load(std::memory_order_relaxed) != seq) return std::nullopt;  // rewritten meanwhile
  return v;
}

}  // namespace peerlink::detail
