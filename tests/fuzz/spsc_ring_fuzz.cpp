// libFuzzer target: the SPSC ring's reader and writer (shm/spsc_ring.h) over a ring whose header
// and slots come from the input, as a corrupt or hostile peer could leave them in shared memory.
// Input: byte 0 picks the capacity (1..64), the next bytes fill the ring memory, the rest is a
// script of operations (pop, push, scribble an index). Reads must stay inside the ring or throw.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "peerlink/errors.h"
#include "shm/spsc_ring.h"

using peerlink::shm::RingMsg;
using peerlink::shm::SpscRing;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint32_t cap = 1u << (data[0] % 7);
  const size_t bytes = SpscRing::bytes_for(cap);
  // Exactly the ring's size on the heap, so ASan flags any access past it.
  std::unique_ptr<uint64_t[]> mem(new uint64_t[bytes / 8]());
  auto* raw = reinterpret_cast<uint8_t*>(mem.get());
  size_t take = std::min(bytes, size - 1);
  std::memcpy(raw, data + 1, take);
  if (data[0] & 0x80) SpscRing::init(raw, cap);  // half the inputs: a well-formed capacity
  const uint8_t* ops = data + 1 + take;
  size_t nops = size - 1 - take;
  try {
    SpscRing ring(raw, cap);
    RingMsg m{};
    for (size_t i = 0; i < nops; ++i) {
      switch (ops[i] % 4) {
        case 0:
        case 1:
          if (ring.pop(&m) && m.seq == 0xdeadbeefULL) m.seq = 0;  // use what was read
          break;
        case 2:
          m.seq = i;
          ring.push(m);
          break;
        case 3: {  // the peer scribbles an index
          uint64_t v = 0;
          std::memcpy(&v, ops + i, std::min<size_t>(8, nops - i));
          std::memcpy(raw + ((ops[i] >> 2) & 1 ? 0 : 64), &v, 8);
          break;
        }
      }
    }
    (void)ring.size();
    (void)ring.empty();
  } catch (const peerlink::Error&) {
  }
  return 0;
}
