// What bootstrap reads from shared memory, as pure functions: bytes in, a validated copy or a typed
// error out (Error naming the rank and the offending value). The rendezvous segment is writable by
// every rank of the job, so nothing in it is trusted; the fuzz target (tests/fuzz/boot_records_fuzz.cpp)
// drives these directly.
#pragma once
#include <cstddef>
#include <cstdint>

namespace peerlink::bootstrap {

// A copy of one rank slot (RankSlot bytes), checked: known state; a joined/left slot names a
// positive pid. Slots carry liveness only; the transport's per-rank data (device, completion
// preference, relay mask, PCI bus id) is its own JoinRecord (src/transport/wire.h).
struct SlotRecord {
  uint32_t state = 0;
  int32_t pid = 0;
  uint64_t start_time = 0;
  uint64_t barrier_count = 0;
};
SlotRecord parse_slot(const void* bytes, size_t n, int rank, int world_size);

// A copy of the rendezvous' failure record (FailureRecord bytes), checked: known state; a recorded
// failure names a dead rank and the rank that saw it, both in [0, world_size) and different, and a
// positive pid.
struct FailureView {
  uint32_t state = 0;
  int32_t dead_rank = -1;
  int32_t dead_pid = 0;
  int32_t seen_by = -1;
  uint64_t when_ticks = 0;
  bool recorded() const;
};
FailureView parse_failure(const void* bytes, size_t n, int world_size);

// Checks the rendezvous layout's header words (world size, layout version) of `n` bytes.
void check_layout_header(const void* bytes, size_t n, int world_size, uint32_t layout_version);

}  // namespace peerlink::bootstrap
