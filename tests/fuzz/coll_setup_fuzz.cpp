// libFuzzer target: the collectives setup record, as read back from the
// bootstrap allgather. Input: the raw record bytes. parse_setup_record must return a record whose
// areas lie inside their claimed allocations, or throw InvalidArgument; never crash, read past the
// input or overflow (ASan + UBSan). Seeds: tests/fuzz/corpus/coll_setup/ (valid host and GPU
// records of rank 1 in a 2-rank job, plus near misses), made by tests/fuzz/corpus/make_coll_setup.py.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "collectives/layout.h"
#include "collectives/setup_record.h"
#include "peerlink/errors.h"

using peerlink::coll::SetupExpect;
using peerlink::coll::SetupRecord;

static_assert(sizeof(SetupRecord) == 296, "update tests/fuzz/corpus/make_coll_setup.py with the record layout");

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (int host = 0; host < 2; ++host) {
    SetupExpect e;
    e.world = 2;
    e.host = host != 0;
    e.cap = 1 << 20;
    e.ll_cap = host ? 0 : (1 << 20);
    e.ll128_cap = host ? 0 : (1 << 20);
    e.flag_bytes = sizeof(peerlink::coll::FlagArea);
    peerlink::coll::DataLayout L;
    L.world = e.world;
    L.cap = e.cap;
    L.ll_cap = e.ll_cap;
    L.ll128_cap = e.ll128_cap;
    e.data_bytes = L.total();
    try {
      SetupRecord r = peerlink::coll::parse_setup_record(data, size, 1, e);
      // What the caller relies on once it returns: both areas inside their allocations.
      if (r.flags_off > r.flags.alloc_bytes || e.flag_bytes > r.flags.alloc_bytes - r.flags_off) std::abort();
      if (r.data_off > r.data.alloc_bytes || e.data_bytes > r.data.alloc_bytes - r.data_off) std::abort();
      if (r.rank != 1 || r.world != 2) std::abort();
      // And the grid every rank derives from such records stays within the flag area.
      SetupRecord both[2] = {r, r};
      const peerlink::coll::GridAgreement g = peerlink::coll::grid_agreement(both, 2);
      if (g.cap < 1 || g.cap > peerlink::coll::kMaxBlocks || g.sm_count < 0) std::abort();
    } catch (const peerlink::InvalidArgument&) {
    }
  }
  return 0;
}
