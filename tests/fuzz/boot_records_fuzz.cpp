// libFuzzer target: what bootstrap reads from the rendezvous segment and the allgather
// (bootstrap/records.h): rank slots, join records, the layout header. Accepted records must
// satisfy every documented bound, and a decoded join record must encode back to itself.
// Input: byte 0 = world size, byte 1 = rank, the rest the record bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "bootstrap/bootstrap.h"
#include "bootstrap/records.h"
#include "peerlink/errors.h"

using namespace peerlink::bootstrap;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int world = 1 + data[0] % kMaxRanks;
  const int rank = data[1] % world;
  const uint8_t* rec = data + 2;
  const size_t n = size - 2;
  {
    // A slot lives in aligned shared memory: give it an aligned copy of exactly sizeof(RankSlot).
    std::unique_ptr<RankSlot> slot(new RankSlot());
    std::memcpy(static_cast<void*>(slot.get()), rec, std::min(n, sizeof(RankSlot)));
    try {
      SlotRecord r = parse_slot(slot.get(), std::min(n, sizeof(RankSlot)), rank, world);
      if (r.state == kJoined || r.state == kLeft) {
        if (r.pid <= 0 || r.device < -1 || r.completion_pref > 15 || r.pci_bus_id.size() >= 32) std::abort();
        if (world < 64 && (r.relay_mask >> world) != 0) std::abort();
      }
    } catch (const peerlink::Error&) {
    }
  }
  try {
    JoinInfo info = decode_join_record(rec, n, rank, world);
    unsigned char again[kJoinRecordBytes];
    encode_join_record(info, again);
    JoinInfo back = decode_join_record(again, sizeof again, rank, world);
    if (back.device != info.device || back.completion_pref != info.completion_pref ||
        back.relay_mask != info.relay_mask || back.pci_bus_id != info.pci_bus_id)
      std::abort();
  } catch (const peerlink::Error&) {
  }
  try {
    check_layout_header(rec, n, world, 2);
  } catch (const peerlink::Error&) {
  }
  return 0;
}
