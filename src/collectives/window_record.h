// The record every rank publishes through the bootstrap allgather when a window is registered
// (peerlink/windows.h): its range, exported (or not), and the window id it believes it registers.
// A record read back from the allgather is untrusted (shared memory any rank of the job can write):
// parse_window_record() checks every field before any offset is added to a mapped base.
// Pure: bytes in, record or InvalidArgument.
#pragma once
#include <cstddef>
#include <cstdint>

#include "gpu/backend.h"

namespace peerlink::coll {

struct WindowRecord {
  static constexpr uint32_t kMagic = 0x504c5752;  // "PLWR"
  static constexpr uint32_t kVersion = 1;
  uint32_t magic = kMagic;
  uint32_t version = kVersion;
  int32_t rank = -1;      // the sender: must equal the allgather slot it came from
  int32_t exported = 0;   // 1: `handle` maps the range; 0: this rank could not export it
  uint64_t id = 0;        // window id: every rank registers windows in the same order
  uint64_t bytes = 0;     // length of the range (> 0)
  uint64_t offset = 0;    // range start inside the exported allocation
  gpu::MemHandle handle;  // kind None when exported == 0
};

// What this rank requires of every record.
struct WindowExpect {
  uint64_t id = 0;    // the id this rank is registering
  bool host = true;   // host backend (HostShm / HostFd handles) or GPU (DeviceIpc / DeviceVmm)
};

// Copies `bytes` of `raw` (must be exactly sizeof(WindowRecord)) and validates it as sent by rank
// `from`: magic and version, rank == from, id == e.id, exported 0 or 1, bytes > 0; when exported:
// a handle kind of the backend, a nonzero allocation and [offset, offset + bytes) inside it without
// overflow; when not exported: handle kind None. Throws InvalidArgument naming the rank, the field
// and the values.
WindowRecord parse_window_record(const void* raw, size_t bytes, int from, const WindowExpect& e);

}  // namespace peerlink::coll
