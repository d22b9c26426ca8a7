#include "transport/registry.h"

#include <cstring>
#include <thread>

#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::detail {
namespace {

uint32_t home_of(uint32_t buf_id) { return (buf_id * 2654435761u) % kRegSlots; }

}  // namespace

RegSlot* registry_slot_for_write(RegSlot* table, uint32_t buf_id) {
  for (uint32_t i = 0; i < kRegSlots; ++i) {
    RegSlot* s = &table[(home_of(buf_id) + i) % kRegSlots];
    if (s->used.load(std::memory_order_acquire) == 0) {
      s->buf_id = buf_id;
      return s;  // marked used by registry_write, after its contents are valid
    }
    if (s->buf_id == buf_id) return s;
  }
  return nullptr;
}

void registry_write(RegSlot* slot, const Publication& p) {
  uint64_t s = slot->seq.load(std::memory_order_relaxed);
  slot->seq.store(s + 1, std::memory_order_relaxed);  // odd: writing
  std::atomic_thread_fence(std::memory_order_release);
  slot->buf_id = p.buf_id;
  slot->version = p.version;
  slot->offset = p.offset;
  slot->len = p.len;
  std::memcpy(&slot->handle, &p.handle, sizeof p.handle);
  slot->seq.store(s + 2, std::memory_order_release);
  slot->used.store(1, std::memory_order_release);
}

std::optional<Publication> registry_read(const RegSlot* table, uint32_t buf_id) {
  for (uint32_t i = 0; i < kRegSlots; ++i) {
    const RegSlot* s = &table[(home_of(buf_id) + i) % kRegSlots];
    if (s->used.load(std::memory_order_acquire) == 0) return std::nullopt;
    if (s->buf_id != buf_id) continue;
    Publication p;
    for (int attempt = 0;; ++attempt) {
      uint64_t a = s->seq.load(std::memory_order_acquire);
      if ((a & 1) == 0) {
        p.buf_id = s->buf_id;
        p.version = s->version;
        p.offset = s->offset;
        p.len = s->len;
        std::memcpy(&p.handle, &s->handle, sizeof p.handle);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (s->seq.load(std::memory_order_relaxed) == a) break;
      }
      if (attempt > 1000) std::this_thread::yield();
      if (attempt > 100000) throw Error(common::cat("registry slot of buffer ", buf_id, " never became consistent"));
    }
    // Untrusted: the published range must lie inside the exported allocation.
    if (p.buf_id != buf_id || p.len == 0 || p.offset > p.handle.alloc_bytes ||
        p.len > p.handle.alloc_bytes - p.offset ||
        (p.handle.kind != gpu::HandleKind::HostShm && p.handle.kind != gpu::HandleKind::DeviceIpc))
      throw Error(common::cat("malformed publication of buffer ", buf_id, ": offset ", p.offset, ", len ", p.len,
                              ", allocation ", p.handle.alloc_bytes, " bytes, kind ",
                              static_cast<uint32_t>(p.handle.kind)));
    return p;
  }
  return std::nullopt;
}

}  // namespace peerlink::detail
