// The versioned registry of published receive buffers: an open-addressed table of RegSlots in the
// pair segment, written by the receiver (seqlock), read by the sender.
#pragma once
#include <cstdint>
#include <optional>

#include "transport/layout.h"

namespace peerlink::detail {

struct Publication {
  uint32_t buf_id = 0;
  uint64_t version = 0;
  uint64_t offset = 0;  // inside the allocation
  uint64_t len = 0;
  gpu::MemHandle handle;
};

// Receiver side. Returns nullptr when the table is full.
RegSlot* registry_slot_for_write(RegSlot* table, uint32_t buf_id);
void registry_write(RegSlot* slot, const Publication& p);

// Sender side: a consistent snapshot of buf_id's publication, or nullopt when never published.
// Throws Error when the snapshot is malformed (offset/len outside the allocation, bad handle kind).
std::optional<Publication> registry_read(const RegSlot* table, uint32_t buf_id);

}  // namespace peerlink::detail
