// libFuzzer target: the transport's other SHM records as a peer may have written them, selected by
// the first byte: a send descriptor, a ring message (reply or arrival), relay chunk metadata and
// geometry, and a join record from the allgather.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "peerlink/errors.h"
#include "transport/wire.h"

using namespace peerlink;
using namespace peerlink::detail;

namespace {
template <class T>
bool take(const uint8_t*& p, size_t& n, T* out) {
  if (n < sizeof(T)) return false;
  std::memcpy(out, p, sizeof(T));
  p += sizeof(T);
  n -= sizeof(T);
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  uint8_t which = data[0];
  const uint8_t* p = data + 1;
  size_t n = size - 1;
  try {
    switch (which % 5) {
      case 0: {
        DescRecord d;
        uint64_t seq;
        if (!take(p, n, &d) || !take(p, n, &seq)) return 0;
        DescRecord v = parse_desc(d, seq, 1);
        if (v.seq != seq || v.status > kStatusLast || v.offset > UINT64_MAX - v.len) __builtin_trap();
        break;
      }
      case 1: {
        shm::RingMsg m;
        uint64_t sent;
        if (!take(p, n, &m) || !take(p, n, &sent)) return 0;
        check_reply(m, sent, 1);
        if (m.seq == 0 || m.seq > sent || m.arg0 > kStatusLast) __builtin_trap();
        break;
      }
      case 2: {
        shm::RingMsg m;
        if (!take(p, n, &m)) return 0;
        check_arrival(m, 1);
        if (m.offset > UINT64_MAX - m.len) __builtin_trap();
        break;
      }
      case 3: {
        RelaySlotMeta m;
        uint64_t chunk, slots, payload;
        if (!take(p, n, &m) || !take(p, n, &chunk) || !take(p, n, &slots) || !take(p, n, &payload)) return 0;
        if (relay_meta_valid(m, chunk) && (m.bytes > chunk || m.msg_offset + m.bytes > m.msg_len)) __builtin_trap();
        check_relay_geometry(slots, chunk, payload, "fuzz");
        if (slots == 0 || slots > 64 || RelayView::bytes(slots, chunk) > payload) __builtin_trap();
        break;
      }
      case 4: {
        JoinRecord j = parse_join(p, n, 0);
        if (!std::memchr(j.pci_bus_id, 0, sizeof j.pci_bus_id)) __builtin_trap();
        break;
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
