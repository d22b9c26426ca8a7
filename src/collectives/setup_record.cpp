// parse_setup_record: the untrusted collectives setup record, checked field by field.
#include "collectives/setup_record.h"

#include <cstring>
#include <string>

#include "collectives/layout.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::coll {
namespace {

// Bounds of a record's grid fields (far above any GPU: H200 has 132 multiprocessors).
constexpr int32_t kMaxSmCount = 1024;
constexpr int32_t kMaxDeviceOrdinal = 1023;

using common::cat;

// [off, off + need) within an allocation of `alloc` bytes, without overflow.
bool fits(uint64_t off, uint64_t need, uint64_t alloc) { return off <= alloc && need <= alloc - off; }

void check_area(int from, const char* name, const gpu::MemHandle& h, uint64_t off, uint64_t need, uint64_t align,
                gpu::HandleKind kind) {
  // Host scratch may be memfd memory exported by descriptor (Options::host_fd).
  if (h.kind != kind && !(kind == gpu::HandleKind::HostShm && h.kind == gpu::HandleKind::HostFd))
    throw InvalidArgument(cat("allreduce setup: rank ", from, "'s ", name, " handle has kind ",
                              static_cast<uint32_t>(h.kind), ", expected ", static_cast<uint32_t>(kind),
                              kind == gpu::HandleKind::HostShm ? " (host SHM)" : " (device IPC)"));
  if (h.alloc_bytes == 0)
    throw InvalidArgument(cat("allreduce setup: rank ", from, "'s ", name, " allocation claims 0 bytes"));
  if (off % align != 0)
    throw InvalidArgument(cat("allreduce setup: rank ", from, "'s ", name, " offset ", off, " is not a multiple of ",
                              align));
  if (!fits(off, need, h.alloc_bytes))
    throw InvalidArgument(cat("allreduce setup: rank ", from, "'s ", name, " area [", off, ", +", need,
                              ") does not fit its allocation of ", h.alloc_bytes, " bytes"));
}

}  // namespace

SetupRecord parse_setup_record(const void* raw, size_t bytes, int from, const SetupExpect& e) {
  if (bytes != sizeof(SetupRecord))
    throw InvalidArgument(cat("allreduce setup: rank ", from, "'s record has ", bytes, " bytes, expected ",
                              sizeof(SetupRecord)));
  SetupRecord r;
  std::memcpy(&r, raw, sizeof r);  // one copy: every check below sees the same bytes
  if (r.magic != SetupRecord::kMagic || r.version != SetupRecord::kVersion)
    throw InvalidArgument(cat("allreduce setup: rank ", from, "'s record has magic ", r.magic, " version ", r.version,
                              ", expected ", SetupRecord::kMagic, " version ", SetupRecord::kVersion,
                              " (a different peerlink build, or corrupt)"));
  if (r.rank != from)
    throw InvalidArgument(cat("allreduce setup: the record in rank ", from, "'s slot claims rank ", r.rank));
  if (r.world != e.world || r.host != (e.host ? 1 : 0) || r.cap != e.cap || r.ll_cap != e.ll_cap ||
      r.ll128_cap != e.ll128_cap)
    throw InvalidArgument(cat("allreduce setup: rank ", from, " uses scratch ", r.cap, " bytes/LL ", r.ll_cap,
                              "/LL128 ", r.ll128_cap, "/", r.world, " ranks/",
                              r.host == 1 ? "host" : r.host == 0 ? "gpu" : "?", "; this rank uses ", e.cap, "/",
                              e.ll_cap, "/", e.ll128_cap, "/", e.world, "/", e.host ? "host" : "gpu",
                              " (set PEERLINK_ALLREDUCE_SCRATCH_BYTES, PEERLINK_ALLREDUCE_LL_MAX and "
                              "PEERLINK_ALLREDUCE_LL128_MAX alike)"));
  if (r.ll128_links != 0 && r.ll128_links != 1)
    throw InvalidArgument(cat("allreduce setup: rank ", from, "'s record has ll128_links ", r.ll128_links,
                              ", expected 0 or 1"));
  if (r.sm_count < 0 || r.sm_count > kMaxSmCount || (e.host ? r.sm_count != 0 : r.sm_count == 0) || r.grid_max < 1 ||
      r.grid_max > kMaxBlocks || r.device < -1 || r.device > kMaxDeviceOrdinal)
    throw InvalidArgument(cat("allreduce setup: rank ", from, "'s record has ", r.sm_count, " multiprocessors, grid_max ",
                              r.grid_max, ", device ", r.device, " (expected ", e.host ? "0" : "1..", e.host ? "" : cat(kMaxSmCount),
                              ", 1..", kMaxBlocks, ", -1..", kMaxDeviceOrdinal, ")"));
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
