#include "bootstrap/records.h"

#include <cstring>

#include "bootstrap/bootstrap.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::bootstrap {
namespace {

using common::cat;
constexpr uint32_t kJoinRecordMagic = 0x4e494f4aU;  // "JOIN"
// Completion is a small enum (Auto, DoneSeq, Ring today); room for more without a layout change.
constexpr uint32_t kMaxCompletionPref = 15;
constexpr int kMaxDevice = 4096;

struct JoinWire {
  uint32_t magic;
  int32_t device;
  uint32_t completion_pref;
  uint32_t reserved;
  uint64_t relay_mask;
  char pci_bus_id[32];
  uint64_t pad;
};
static_assert(sizeof(JoinWire) == kJoinRecordBytes, "join record is 64 bytes");

uint64_t mask_beyond(int world_size) {
  return world_size >= 64 ? 0 : ~((uint64_t(1) << world_size) - 1);
}

// A bus id from shared memory: must end within the field and use the characters of "0000:3b:00.0".
std::string checked_bus_id(const char* field, size_t cap, const char* who, int rank) {
  const void* nul = std::memchr(field, '\0', cap);
  if (!nul) throw Error(cat(who, " of rank ", rank, ": PCI bus id is not NUL-terminated within ", cap, " bytes"));
  std::string id(field, static_cast<const char*>(nul) - field);
  for (unsigned char c : id)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.'))
      throw Error(cat(who, " of rank ", rank, ": PCI bus id has invalid character code ", int(c)));
  return id;
}

void check_common(const char* who, int rank, int world_size, int32_t device, uint32_t pref, uint64_t relay) {
  if (device < -1 || device >= kMaxDevice) throw Error(cat(who, " of rank ", rank, ": device ", device, " out of range"));
  if (pref > kMaxCompletionPref)
    throw Error(cat(who, " of rank ", rank, ": completion preference ", pref, " out of range"));
  if (relay & mask_beyond(world_size))
    throw Error(cat(who, " of rank ", rank, ": relay mask 0x", std::hex, relay, std::dec, " names ranks beyond world size ",
                    world_size));
}

}  // namespace

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
  std::memcpy(&r.device, &s->device, sizeof r.device);
  std::memcpy(&r.completion_pref, &s->completion_pref, sizeof r.completion_pref);
  std::memcpy(&r.relay_mask, &s->relay_mask, sizeof r.relay_mask);
  r.barrier_count = s->barrier_count.load(std::memory_order_acquire);
  char bus[sizeof s->pci_bus_id];
  std::memcpy(bus, s->pci_bus_id, sizeof bus);
  if (r.state != kEmpty && r.state != kJoined && r.state != kLeft && r.state != kJoining)
    throw Error(cat("slot of rank ", rank, ": invalid state ", r.state, " (corrupted rendezvous segment)"));
  if ((r.state == kJoined || r.state == kLeft) && r.pid <= 0)
    throw Error(cat("slot of rank ", rank, ": ", r.state == kJoined ? "joined" : "left", " with invalid pid ", r.pid));
  if (r.state == kJoined || r.state == kLeft) {
    check_common("slot", rank, world_size, r.device, r.completion_pref, r.relay_mask);
    r.pci_bus_id = checked_bus_id(bus, sizeof bus, "slot", rank);
  }
  return r;
}

void encode_join_record(const JoinInfo& info, void* out) {
  JoinWire w{};
  w.magic = kJoinRecordMagic;
  w.device = info.device;
  w.completion_pref = static_cast<uint32_t>(info.completion_pref);
  w.relay_mask = info.relay_mask;
  if (info.pci_bus_id.size() >= sizeof w.pci_bus_id)
    throw InvalidArgument(cat("PCI bus id '", info.pci_bus_id, "' longer than ", sizeof w.pci_bus_id - 1, " characters"));
  std::memcpy(w.pci_bus_id, info.pci_bus_id.data(), info.pci_bus_id.size());
  std::memcpy(out, &w, sizeof w);
}

JoinInfo decode_join_record(const void* bytes, size_t n, int rank, int world_size) {
  if (n != kJoinRecordBytes) throw Error(cat("join record of rank ", rank, ": ", n, " bytes, expected ", kJoinRecordBytes));
  if (world_size < 1 || world_size > kMaxRanks)
    throw InvalidArgument(cat("decode_join_record: world size ", world_size, " out of range"));
  JoinWire w;
  std::memcpy(&w, bytes, sizeof w);
  if (w.magic != kJoinRecordMagic)
    throw Error(cat("join record of rank ", rank, ": bad magic 0x", std::hex, w.magic, std::dec));
  check_common("join record", rank, world_size, w.device, w.completion_pref, w.relay_mask);
  JoinInfo info;
  info.device = w.device;
  info.completion_pref = static_cast<int>(w.completion_pref);
  info.relay_mask = w.relay_mask;
  info.pci_bus_id = checked_bus_id(w.pci_bus_id, sizeof w.pci_bus_id, "join record", rank);
  return info;
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
