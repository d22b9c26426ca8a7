// parse_setup_record: the untrusted collectives setup record, checked field by field.
#include "collectives/setup_record.h"

#include <cstring>
#include <string>

#include "collectives/layout.h"
#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::coll {
namespace {

// Bounds of a record's grid fields (far above any GPU: H200 has 132 multiprocessors).
constexpr int32_t kMaxSmCount = 1024;
constexpr int32_t kMaxDeviceOrdinal = 1023;

// [off, off + need) within an allocation of `alloc` bytes, without overflow.
bool fits(uint64_t off, uint64_t need, uint64_t alloc) { return off <= alloc && need <= alloc - off; }

void check_area(int from, const char* name, const gpu::MemHandle& h, uint64_t off, uint64_t need, uint64_t align,
                gpu::HandleKind kind) {
  // Host scratch may be memfd memory exported by descriptor (Options::host_fd).
  if (h.kind != kind && !(kind == gpu::HandleKind::HostShm && h.kind == gpu::HandleKind::HostFd))
    throw InvalidArgument(common::format("allreduce setup: rank {}'s {} handle has kind {}, expected {}{}", from, name,
                                         static_cast<uint32_t>(h.kind), static_cast<uint32_t>(kind),
                                         kind == gpu::HandleKind::HostShm ? " (host SHM)" : " (device IPC)"));
  if (h.alloc_bytes == 0)
    throw InvalidArgument(common::format("allreduce setup: rank {}'s {} allocation claims 0 bytes", from, name));
  if (off % align != 0)
    throw InvalidArgument(
        common::format("allreduce setup: rank {}'s {} offset {} is not a multiple of {}", from, name, off, align));
  if (!fits(off, need, h.alloc_bytes))
    throw InvalidArgument(
        common::format("allreduce setup: rank {}'s {} area [{}, +{}) does not fit its allocation of {} bytes", from,
                       name, off, need, h.alloc_bytes));
}

}  // namespace

SetupRecord parse_setup_record(const void* raw, size_t bytes, int from, const SetupExpect& e) {
  if (bytes != sizeof(SetupRecord))
    throw InvalidArgument(common::format("allreduce setup: rank {}'s record has {} bytes, expected {}", from, bytes,
                                         sizeof(SetupRecord)));
  SetupRecord r;
  std::memcpy(&r, raw, sizeof r);  // one copy: every check below sees the same bytes
  if (r.magic != SetupRecord::kMagic || r.version != SetupRecord::kVersion)
    throw InvalidArgument(
        common::format("allreduce setup: rank {}'s record has magic {} version {}, expected {} version {} (a different "
                       "peerlink build, or corrupt)",
                       from, r.magic, r.version, SetupRecord::kMagic, SetupRecord::kVersion));
  if (r.rank != from)
    throw InvalidArgument(common::format("allreduce setup: the record in rank {}'s slot claims rank {}", from, r.rank));
  if (r.world != e.world || r.host != (e.host ? 1 : 0) || r.cap != e.cap || r.ll_cap != e.ll_cap ||
      r.ll128_cap != e.ll128_cap)
    throw InvalidArgument(common::format(
        "allreduce setup: rank {} uses scratch {} bytes/LL {}/LL128 {}/{} ranks/{}; this rank uses {}/{}/{}/{}/{} (set "
        "PEERLINK_ALLREDUCE_SCRATCH_BYTES, PEERLINK_ALLREDUCE_LL_MAX and PEERLINK_ALLREDUCE_LL128_MAX alike)",
        from, r.cap, r.ll_cap, r.ll128_cap, r.world,
        r.host == 1   ? "host"
        : r.host == 0 ? "gpu"
                      : "?",
        e.cap, e.ll_cap, e.ll128_cap, e.world, e.host ? "host" : "gpu"));
  if (r.ll128_links != 0 && r.ll128_links != 1)
    throw InvalidArgument(
        common::format("allreduce setup: rank {}'s record has ll128_links {}, expected 0 or 1", from, r.ll128_links));
  if (r.sm_count < 0 || r.sm_count > kMaxSmCount || (e.host ? r.sm_count != 0 : r.sm_count == 0) || r.grid_max < 1 ||
      r.grid_max > kMaxBlocks || r.device < -1 || r.device > kMaxDeviceOrdinal)
    throw InvalidArgument(
        common::format("allreduce setup: rank {}'s record has {} multiprocessors, grid_max {}, device {} (expected "
                       "{}{}, 1..{}, -1..{})",
                       from, r.sm_count, r.grid_max, r.device, e.host ? "0" : "1..",
                       e.host ? "" : common::format("{}", kMaxSmCount), kMaxBlocks, kMaxDeviceOrdinal));
  const gpu::HandleKind kind = e.host ? gpu::HandleKind::HostShm : gpu::HandleKind::DeviceIpc;
  check_area(from, "flags", r.flags, r.flags_off, e.flag_bytes, 8, kind);
  // LL128 lines must not straddle 128-byte boundaries in the peer's mapping.
  check_area(from, "data", r.data, r.data_off, e.data_bytes, e.ll128_cap ? 128 : 16, kind);
  return r;
}

GridAgreement grid_agreement(const SetupRecord* all, int world) {
  GridAgreement g;
  g.cap = kMaxBlocks;
  for (int p = 0; p < world; ++p) {
    const SetupRecord& r = all[p];
    if (r.sm_count > 0 && (g.sm_count == 0 || r.sm_count < g.sm_count)) g.sm_count = r.sm_count;
    if (r.grid_max < g.cap) g.cap = r.grid_max;
    if (r.device < 0) continue;
    int sharers = 0;
    for (int q = 0; q < world; ++q) sharers += all[q].process == r.process && all[q].device == r.device ? 1 : 0;
    if (sharers > 1) {
      g.shared = true;
      const int share = r.sm_count / sharers > 1 ? r.sm_count / sharers : 1;
      if (share < g.cap) g.cap = share;
    }
  }
  return g;
}

}  // namespace peerlink::coll
