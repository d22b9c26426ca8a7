// libFuzzer target: what bootstrap reads from the rendezvous segment (bootstrap/records.h): rank
// slots (liveness only: state, pid, start time, barrier count), the failure record and the layout
// header. Accepted
// records must satisfy every documented bound. The transport's join record has its own target
// (transport_wire_fuzz.cpp).
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
      if (r.state != kEmpty && r.state != kJoined && r.state != kLeft && r.state != kJoining) std::abort();
      if ((r.state == kJoined || r.state == kLeft) && r.pid <= 0) std::abort();
    } catch (const peerlink::Error&) {
    }
  }
  {
    std::unique_ptr<FailureRecord> f(new FailureRecord());
    std::memcpy(static_cast<void*>(f.get()), rec, std::min(n, sizeof(FailureRecord)));
    try {
      FailureView v = parse_failure(f.get(), std::min(n, sizeof(FailureRecord)), world);
      if (v.state != kNoFailure && v.state != kFailureRecording && v.state != kFailureRecorded) std::abort();
      if (v.recorded() && (v.dead_rank < 0 || v.dead_rank >= world || v.seen_by < 0 || v.seen_by >= world ||
                           v.seen_by == v.dead_rank || v.dead_pid <= 0))
        std::abort();
    } catch (const peerlink::Error&) {
    }
  }
  try {
    check_layout_header(rec, n, world, kLayoutVersion);
    uint32_t ws, ver;
    std::memcpy(&ws, rec, 4);
    std::memcpy(&ver, rec + 4, 4);
    if (ver != kLayoutVersion || static_cast<int>(ws) != world) std::abort();
  } catch (const peerlink::Error&) {
  }
  return 0;
}
