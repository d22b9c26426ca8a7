#include "bootstrap/records.h"

#include <cstring>

#include "bootstrap/bootstrap.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::bootstrap {
using common::cat;

SlotRecord parse_slot(const void* bytes, size_t n, int rank, int world_size) {
  if (n < sizeof(RankSlot)) throw Error(cat("slot of rank ", rank, ": ", n, " bytes, need ", sizeof(RankSlot)));
  if (world_size < 1 || world_size > kMaxRanks || rank < 0 || rank >= world_size)
    throw InvalidArgument(cat("parse_slot: rank ", rank, " / world size ", world_size, " out of range"));
  const auto* s = static_cast<const RankSlot*>(bytes);
  SlotRecord r;
  // Field by field into a private copy (the slot may change under us; decisions use the copy).
  r.state = s->state.load(std::memory_order_acquire);
  std::memcpy(&r.pid, &s->pid, sizeof r.pid);
  std::memcpy(&r.start_time, &s->start_time, sizeof r.start_time);
  r.barrier_count = s->barrier_count.load(std::memory_order_acquire);
  if (r.state != kEmpty && r.state != kJoined && r.state != kLeft && r.state != kJoining)
    throw Error(cat("slot of rank ", rank, ": invalid state ", r.state, " (corrupted rendezvous segment)"));
  if ((r.state == kJoined || r.state == kLeft) && r.pid <= 0)
    throw Error(cat("slot of rank ", rank, ": ", r.state == kJoined ? "joined" : "left", " with invalid pid ", r.pid));
  return r;
}

void check_layout_header(const void* bytes, size_t n, int world_size, uint32_t layout_version) {
  if (n < 8) throw Error(cat("rendezvous layout header: ", n, " bytes, need 8"));
  uint32_t ws, ver;
  std::memcpy(&ws, bytes, 4);
  std::memcpy(&ver, static_cast<const char*>(bytes) + 4, 4);
  if (ver != layout_version)
    throw Error(cat("rendezvous segment has layout version ", ver, ", expected ", layout_version,
                    " (another peerlink version?)"));
  if (static_cast<int64_t>(ws) != world_size)
    throw InvalidArgument(cat("this rank was created with world_size ", world_size,
                              " but the job's other ranks use world_size ", ws));
}

}  // namespace peerlink::bootstrap
