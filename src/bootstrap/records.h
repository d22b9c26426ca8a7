// What bootstrap reads from shared memory, as pure functions: bytes in, a validated copy or a typed
// error out (Error naming the rank and the offending value). The rendezvous segment is writable by
// every rank of the job, so nothing in it is trusted; the fuzz target (tests/fuzz/boot_records_fuzz.cpp)
// drives these directly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace peerlink::bootstrap {

struct JoinInfo;

// A copy of one rank slot (RankSlot bytes), checked: known state; a joined/left slot names a
// positive pid; device >= -1; completion preference in range; relay mask without bits at or
// beyond world_size; PCI bus id NUL-terminated, [0-9A-Fa-f:.] only.
struct SlotRecord {
  uint32_t state = 0;
  int32_t pid = 0;
  uint64_t start_time = 0;
  int32_t device = -1;
  uint32_t completion_pref = 0;
  uint64_t relay_mask = 0;
  uint64_t barrier_count = 0;
  std::string pci_bus_id;
};
SlotRecord parse_slot(const void* bytes, size_t n, int rank, int world_size);

// The fixed-size join record ranks exchange through allgather (device, completion preference,
// relay mask, PCI bus id): the transport's per-rank setup data, kept out of the rendezvous layout.
constexpr size_t kJoinRecordBytes = 64;
void encode_join_record(const JoinInfo& info, void* out);  // writes kJoinRecordBytes
JoinInfo decode_join_record(const void* bytes, size_t n, int rank, int world_size);

// Checks the rendezvous layout's header words (world size, layout version) of `n` bytes.
void check_layout_header(const void* bytes, size_t n, int world_size, uint32_t layout_version);

}  // namespace peerlink::bootstrap
