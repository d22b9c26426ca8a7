#include "bootstrap/records.h"

#include <cstring>

#include "bootstrap/bootstrap.h"
#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::bootstrap {

SlotRecord parse_slot(const void* bytes, size_t n, int rank, int world_size) {
  if (n < sizeof(RankSlot))
    throw Error(common::format("slot of rank {}: {} bytes, need {}", rank, n, sizeof(RankSlot)));
  if (world_size < 1 || world_size > kMaxRanks || rank < 0 || rank >= world_size)
    throw InvalidArgument(common::format("parse_slot: rank {} / world size {} out of range", rank, world_size));
  const auto* s = static_cast<const RankSlot*>(bytes);
  SlotRecord r;
  // Field by field into a private copy (the slot may change under us; decisions use the copy).
  r.state = s->state.load(std::memory_order_acquire);
  std::memcpy(&r.pid, &s->pid, sizeof r.pid);
  std::memcpy(&r.start_time, &s->start_time, sizeof r.start_time);
  r.barrier_count = s->barrier_count.load(std::memory_order_acquire);
  if (r.state != kEmpty && r.state != kJoined && r.state != kLeft && r.state != kJoining)
    throw Error(common::format("slot of rank {}: invalid state {} (corrupted rendezvous segment)", rank, r.state));
  if ((r.state == kJoined || r.state == kLeft) && r.pid <= 0)
    throw Error(
        common::format("slot of rank {}: {} with invalid pid {}", rank, r.state == kJoined ? "joined" : "left", r.pid));
  return r;
}

bool FailureView::recorded() const { return state == kFailureRecorded; }

FailureView parse_failure(const void* bytes, size_t n, int world_size) {
  if (n < sizeof(FailureRecord))
    throw Error(common::format("rendezvous failure record: {} bytes, need {}", n, sizeof(FailureRecord)));
  if (world_size < 1 || world_size > kMaxRanks)
    throw InvalidArgument(common::format("parse_failure: world size {} out of range", world_size));
  const auto* f = static_cast<const FailureRecord*>(bytes);
  FailureView v;
  v.state = f->state.load(std::memory_order_acquire);
  std::memcpy(&v.dead_rank, &f->dead_rank, sizeof v.dead_rank);
  std::memcpy(&v.dead_pid, &f->dead_pid, sizeof v.dead_pid);
  std::memcpy(&v.seen_by, &f->seen_by, sizeof v.seen_by);
  std::memcpy(&v.when_ticks, &f->when_ticks, sizeof v.when_ticks);
  if (v.state != kNoFailure && v.state != kFailureRecording && v.state != kFailureRecorded)
    throw Error(common::format("rendezvous failure record: invalid state {} (corrupted rendezvous segment)", v.state));
  if (v.recorded() && (v.dead_rank < 0 || v.dead_rank >= world_size || v.seen_by < 0 || v.seen_by >= world_size ||
                       v.seen_by == v.dead_rank || v.dead_pid <= 0))
    throw Error(common::format("rendezvous failure record: dead rank {} (pid {}) seen by rank {} is invalid in a "
                               "world of {} (corrupted rendezvous segment)",
                               v.dead_rank, v.dead_pid, v.seen_by, world_size));
  return v;
}

void check_layout_header(const void* bytes, size_t n, int world_size, uint32_t layout_version) {
  if (n < 8) throw Error(common::format("rendezvous layout header: {} bytes, need 8", n));
  uint32_t ws, ver;
  std::memcpy(&ws, bytes, 4);
  std::memcpy(&ver, static_cast<const char*>(bytes) + 4, 4);
  if (ver != layout_version)
    throw Error(common::format("rendezvous segment has layout version {}, expected {} (another peerlink version?)", ver,
                               layout_version));
  if (static_cast<int64_t>(ws) != world_size)
    throw InvalidArgument(common::format(
        "this rank was created with world_size {} but the job's other ranks use world_size {}", world_size, ws));
}

}  // namespace peerlink::bootstrap
