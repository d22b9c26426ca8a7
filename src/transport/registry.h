// The versioned registry of published receive buffers: an open-addressed table of RegSlots in the
// pair segment, written by the receiver (seqlock), read by the sender. Also the posted-irecv table
// of the same segment (written by the receiver, read by the sender for its own message only).
#pragma once
#include <cstdint>
#include <optional>

#include "transport/layout.h"
#include "transport/wire.h"

namespace peerlink::detail {

// Receiver side. Returns nullptr when the table is full.
RegSlot* registry_slot_for_write(RegSlot* table, uint32_t buf_id);
void registry_write(RegSlot* slot, const Publication& p);
// Marks the slot's publication revoked (its buffer was freed): senders get InvalidArgument instead
// of writing. A later registry_write publishes again.
void registry_revoke(RegSlot* slot);

// Sender side: a consistent snapshot of buf_id's publication (revoked ones included, see
// Publication::revoked), or nullopt when never published. Throws Error when the snapshot is
// malformed (parse_publication).
std::optional<Publication> registry_read(const RegSlot* table, uint32_t buf_id);

// Receiver: records posted irecv `seq`.
void posted_write(PostedRecv* table, uint64_t seq, uint32_t buf_id, uint64_t offset, uint64_t len);
// Sender: the receiver's posted irecv `seq`, when it is posted (and not yet overwritten).
struct PostedView {
  uint32_t buf_id;
  uint64_t offset, len;
};
std::optional<PostedView> posted_read(const PostedRecv* table, uint64_t seq);

}  // namespace peerlink::detail
