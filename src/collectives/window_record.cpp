// parse_window_record: the untrusted window registration record, checked field by field.
#include "collectives/window_record.h"

#include <cstring>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::coll {

WindowRecord parse_window_record(const void* raw, size_t bytes, int from, const WindowExpect& e) {
  if (bytes != sizeof(WindowRecord))
    throw InvalidArgument(common::format("register_window: rank {}'s record has {} bytes, expected {}", from, bytes,
                                         sizeof(WindowRecord)));
  WindowRecord r;
  std::memcpy(&r, raw, sizeof r);  // one copy: every check below sees the same bytes
  if (r.magic != WindowRecord::kMagic || r.version != WindowRecord::kVersion)
    throw InvalidArgument(
        common::format("register_window: rank {}'s record has magic {} version {}, expected {} version {} (a different "
                       "peerlink build, or corrupt)",
                       from, r.magic, r.version, WindowRecord::kMagic, WindowRecord::kVersion));
  if (r.rank != from)
    throw InvalidArgument(common::format("register_window: the record in rank {}'s slot claims rank {}", from, r.rank));
  if (r.id != e.id)
    throw InvalidArgument(
        common::format("register_window: rank {} registers window {}, this rank window {} (every rank must register "
                       "and deregister windows in the same order)",
                       from, r.id, e.id));
  if (r.bytes == 0) throw InvalidArgument(common::format("register_window: rank {}'s window has 0 bytes", from));
  if (r.exported != 0 && r.exported != 1)
    throw InvalidArgument(common::format("register_window: rank {}'s record has exported = {}", from, r.exported));
  const auto k = r.handle.kind;
  if (!r.exported) {
    if (k != gpu::HandleKind::None)
      throw InvalidArgument(
          common::format("register_window: rank {} did not export its window but sent a handle of kind {}", from,
                         static_cast<uint32_t>(k)));
    return r;
  }
  const bool ok_kind = e.host ? (k == gpu::HandleKind::HostShm || k == gpu::HandleKind::HostFd)
                              : (k == gpu::HandleKind::DeviceIpc || k == gpu::HandleKind::DeviceVmm);
  if (!ok_kind)
    throw InvalidArgument(
        common::format("register_window: rank {}'s handle has kind {}{}", from, static_cast<uint32_t>(k),
                       e.host ? ", expected host memory (1 or 3)" : ", expected device memory (2 or 4)"));
  const uint64_t alloc = r.handle.alloc_bytes;
  if (alloc == 0) throw InvalidArgument(common::format("register_window: rank {}'s allocation claims 0 bytes", from));
  if (r.offset > alloc || r.bytes > alloc - r.offset)
    throw InvalidArgument(
        common::format("register_window: rank {}'s window [{}, +{}) does not fit its allocation of {} bytes", from,
                       r.offset, r.bytes, alloc));
  return r;
}

}  // namespace peerlink::coll
