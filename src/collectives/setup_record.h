// The record every rank publishes once through the bootstrap allgather when a communicator's
// collectives are set up: its two exported allocations (flags, data) and the geometry it assumes.
// A record read back from the allgather is untrusted (shared memory any rank of the job can
// write): parse_setup_record() checks every field against what this rank expects before any
// offset is added to a mapped base (a faulty or hostile peer must not make this rank write outside
// its mappings). Pure: bytes in, record or InvalidArgument.
#pragma once
#include <cstddef>
#include <cstdint>

#include "gpu/backend.h"

namespace peerlink::coll {

struct SetupRecord {
  static constexpr uint32_t kMagic = 0x504c4352;  // "PLCR"
  static constexpr uint32_t kVersion = 3;  // 2: ll128_cap, ll128_links; 3: the grid fields
  uint32_t magic = kMagic;
  uint32_t version = kVersion;
  int32_t rank = -1;   // the sender: must equal the allgather slot it came from
  int32_t world = 0;
  int32_t host = 0;    // 1: host backend (POSIX SHM handles), 0: GPU (device IPC handles)
  int32_t ll128_links = 0;  // 1: every pair of this rank is NVLink or one GPU (may carry LL128 lines)
  uint64_t cap = 0;     // bytes per region position (DataLayout::cap)
  uint64_t ll_cap = 0;  // LL bytes per (slot, source rank) (DataLayout::ll_cap)
  uint64_t ll128_cap = 0;  // LL128 bytes per (slot, source rank) (DataLayout::ll128_cap)
  uint64_t flags_off = 0, data_off = 0;  // offsets of the areas inside their allocations
  gpu::MemHandle flags, data;
  // The grid (grid_agreement): this rank's multiprocessors (0 on the host backend), the most blocks
  // its Options allow (Options::max_blocks, else kMaxBlocks), and which process and device it runs
  // in (a hash of its pid and start time; the device ordinal, -1 on the host), so that every rank counts
  // the ranks sharing each GPU as threads of one process.
  int32_t sm_count = 0;
  int32_t grid_max = 0;
  uint64_t process = 0;
  int32_t device = -1;
  int32_t reserved = 0;
};

// What this rank requires of every record (its own geometry: all ranks must agree).
struct SetupExpect {
  int world = 0;
  bool host = true;
  uint64_t cap = 0;
  uint64_t ll_cap = 0;
  uint64_t ll128_cap = 0;
  uint64_t flag_bytes = 0;  // sizeof(FlagArea)
  uint64_t data_bytes = 0;  // DataLayout::total()
};

// Copies `bytes` of `raw` (must be exactly sizeof(SetupRecord)) and validates the record as sent
// by rank `from`: magic and version, rank == from, world/host/cap/ll_cap/ll128_cap equal to `e`,
// ll128_links 0 or 1, handle kinds matching the backend, allocation sizes nonzero, offsets aligned
// (8 B flags; 16 B data, 128 B when there is an LL128 area) and
// [off, off + need) inside the allocation without overflow. Throws InvalidArgument naming the rank,
// the field and the values.
SetupRecord parse_setup_record(const void* raw, size_t bytes, int from, const SetupExpect& e);

// The grid every rank's kernels use, computed alike on every rank from the same parsed records:
// sm_count, the smallest multiprocessor count; cap, the most blocks of any collective kernel. The
// cap is the smallest grid_max, and where ranks of one process share a GPU (threads), that GPU's
// multiprocessors divided among them: each spins for the others, so all their blocks must be
// resident at once (a full grid each hung until the device timeout; one H200).
struct GridAgreement {
  int sm_count = 0;
  int cap = 0;
  bool shared = false;  // some rank shares its GPU with another rank of its process
};
GridAgreement grid_agreement(const SetupRecord* all, int world);

}  // namespace peerlink::coll
