// parse_window_record: the untrusted window registration record, checked field by field.
#include "collectives/window_record.h"

#include <cstring>

#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::coll {

using common::cat;

WindowRecord parse_window_record(const void* raw, size_t bytes, int from, const WindowExpect& e) {
  if (bytes != sizeof(WindowRecord))
    throw InvalidArgument(cat("register_window: rank ", from, "'s record has ", bytes, " bytes, expected ",
                              sizeof(WindowRecord)));
  WindowRecord r;
  std::memcpy(&r, raw, sizeof r);  // one copy: every check below sees the same bytes
  if (r.magic != WindowRecord::kMagic || r.version != WindowRecord::kVersion)
    throw InvalidArgument(cat("register_window: rank ", from, "'s record has magic ", r.magic, " version ", r.version,
                              ", expected ", WindowRecord::kMagic, " version ", WindowRecord::kVersion,
                              " (a different peerlink build, or corrupt)"));
  if (r.rank != from)
    throw InvalidArgument(cat("register_window: the record in rank ", from, "'s slot claims rank ", r.rank));
  if (r.id != e.id)
    throw InvalidArgument(cat("register_window: rank ", from, " registers window ", r.id, ", this rank window ", e.id,
                              " (every rank must register and deregister windows in the same order)"));
  if (r.bytes == 0) throw InvalidArgument(cat("register_window: rank ", from, "'s window has 0 bytes"));
  if (r.exported != 0 && r.exported != 1)
    throw InvalidArgument(cat("register_window: rank ", from, "'s record has exported = ", r.exported));
  const auto k = r.handle.kind;
  if (!r.exported) {
    if (k != gpu::HandleKind::None)
      throw InvalidArgument(cat("register_window: rank ", from, " did not export its window but sent a handle of kind ",
                                static_cast<uint32_t>(k)));
    return r;
  }
  const bool ok_kind = e.host ? (k == gpu::HandleKind::HostShm || k == gpu::HandleKind::HostFd)
                              : (k == gpu::HandleKind::DeviceIpc || k == gpu::HandleKind::DeviceVmm);
  if (!ok_kind)
    throw InvalidArgument(cat("register_window: rank ", from, "'s handle has kind ", static_cast<uint32_t>(k),
                              e.host ? ", expected host memory (1 or 3)" : ", expected device memory (2 or 4)"));
  const uint64_t alloc = r.handle.alloc_bytes;
  if (alloc == 0) throw InvalidArgument(cat("register_window: rank ", from, "'s allocation claims 0 bytes"));
  if (r.offset > alloc || r.bytes > alloc - r.offset)
    throw InvalidArgument(cat("register_window: rank ", from, "'s window [", r.offset, ", +", r.bytes,
                              ") does not fit its allocation of ", alloc, " bytes"));
  return r;
}

}  // namespace peerlink::coll
