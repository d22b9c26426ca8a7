// Parsers of what a peer wrote into shared memory. Every record of layout.h that a process reads
// from another is copied out first and validated here; these are pure functions (bytes in, a
// validated struct or a typed Error out), so libFuzzer can drive them (tests/fuzz/).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/layout.h"

namespace peerlink::detail {

// A buffer publication as the sender uses it.
struct Publication {
  uint32_t buf_id = 0;
  uint64_t version = 0;
  uint64_t offset = 0;  // inside the allocation
  uint64_t len = 0;
  gpu::MemHandle handle;
  bool revoked = false;  // the receiver freed the buffer (Transport::free_memory)
};

// A consistent snapshot of one registry slot (plain data, copied under the seqlock).
struct RegRecord {
  uint32_t buf_id = 0;
  uint32_t state = 0;  // RegState
  uint64_t version = 0;
  uint64_t offset = 0;
  uint64_t len = 0;
  gpu::MemHandle handle;
};

// Throws Error when the record is not a well-formed publication of `buf_id`: wrong id or state,
// version 0, empty range, range outside the allocation, unknown handle kind, unterminated name.
Publication parse_publication(const RegRecord& r, uint32_t buf_id);

// A send's descriptor (done_seq completion), validated for message `seq`.
struct DescRecord {
  uint64_t seq = 0;
  uint32_t buf_id = 0;
  uint32_t status = 0;
  uint64_t offset = 0;
  uint64_t len = 0;
};
// Throws Error naming `peer` when the descriptor is not the one of `seq` or is malformed.
DescRecord parse_desc(const DescRecord& d, uint64_t seq, int peer);

// Reply on the ack ring (CTS or ACK) to a sender that has sent `sent` messages.
void check_reply(const shm::RingMsg& m, uint64_t sent, int peer);
// Message on the msg ring (RTS or SEND_DONE).
void check_arrival(const shm::RingMsg& m, int peer);

// Relay staging geometry read from the sender's header: must fit the mapped segment.
void check_relay_geometry(uint64_t slots, uint64_t chunk_bytes, size_t segment_payload_bytes, const std::string& name);
// Metadata of one relay chunk: false when it cannot be used (the chunk is then an error chunk and
// its message fails on the receiver; nothing is written).
bool relay_meta_valid(const RelaySlotMeta& m, uint64_t chunk_bytes);

// Per-rank join information, exchanged with Bootstrap::allgather.
struct JoinRecord {
  uint32_t magic = 0;
  uint32_t version = 0;
  int32_t device = -1;
  uint32_t completion_pref = 0;  // peerlink::Completion as int
  uint64_t relay_mask = 0;       // bit p: this rank wants relay towards rank p
  char pci_bus_id[32] = {};      // NUL-terminated; empty for host memory
};
constexpr uint32_t kJoinMagic = 0x4e494f4a;  // "JOIN"
constexpr uint32_t kJoinVersion = 1;
static_assert(sizeof(JoinRecord) <= 1024, "fits one allgather slot");
// Throws Error naming `rank` when the bytes are not a valid JoinRecord.
JoinRecord parse_join(const void* bytes, size_t n, int rank);

const char* status_text(uint64_t status);

}  // namespace peerlink::detail
