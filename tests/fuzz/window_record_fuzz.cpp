// libFuzzer target: the window registration record (src/collectives/window_record.h), as read back
// from the bootstrap allgather. Input: one selector byte (the sender's rank and the window id this
// rank expects), then the raw record bytes. parse_window_record must, on both backends, return a
// record that claims the sender's rank and the expected id, with [offset, offset + bytes) inside
// its allocation when exported (and no handle when not), or throw InvalidArgument; never crash,
// read past the input or overflow (ASan + UBSan). Seeds: tests/fuzz/corpus/window_record/ (valid
// host and GPU records, unexported ones, near misses), made by tests/fuzz/corpus/make_coll_setup.py.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "collectives/window_record.h"
#include "peerlink/errors.h"

using peerlink::coll::WindowExpect;
using peerlink::coll::WindowRecord;
using peerlink::gpu::HandleKind;

static_assert(sizeof(WindowRecord) == 144, "update tests/fuzz/corpus/make_coll_setup.py with the record layout");

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // Selector: low 3 bits the sending rank (0..7), the next 3 bits the expected id - 1.
  const int from = data[0] & 7;
  const uint64_t id = ((data[0] >> 3) & 7) + 1;
  ++data;
  --size;
  for (int host = 0; host < 2; ++host) {
    WindowExpect e;
    e.id = id;
    e.host = host != 0;
    try {
      WindowRecord r = peerlink::coll::parse_window_record(data, size, from, e);
      // What register_window relies on once it returns.
      if (r.rank != from || r.id != id || r.bytes == 0) std::abort();
      if (r.magic != WindowRecord::kMagic || r.version != WindowRecord::kVersion) std::abort();
      if (r.exported == 0) {
        if (r.handle.kind != HandleKind::None) std::abort();
        continue;
      }
      if (r.exported != 1) std::abort();
      const HandleKind k = r.handle.kind;
      const bool ok = host ? (k == HandleKind::HostShm || k == HandleKind::HostFd)
                           : (k == HandleKind::DeviceIpc || k == HandleKind::DeviceVmm);
      if (!ok) std::abort();
      const uint64_t alloc = r.handle.alloc_bytes;
      // offset + bytes <= alloc, computed without wrapping.
      if (alloc == 0 || r.offset > alloc || r.bytes > alloc - r.offset) std::abort();
    } catch (const peerlink::InvalidArgument&) {
    }
  }
  return 0;
}
