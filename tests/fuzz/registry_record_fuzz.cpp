// libFuzzer target: a registry slot as a peer may have written it (parse_publication), and the
// posted-irecv record read back through the registry module.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "peerlink/errors.h"
#include "transport/wire.h"

using namespace peerlink;
using namespace peerlink::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RegRecord r;
  if (size < sizeof r + 4) return 0;
  std::memcpy(&r, data, sizeof r);
  uint32_t want;
  std::memcpy(&want, data + sizeof r, 4);
  try {
    Publication p = parse_publication(r, want);
    // What the sender relies on after a successful parse.
    if (p.buf_id != want || p.len == 0 || p.offset > p.handle.alloc_bytes || p.len > p.handle.alloc_bytes - p.offset)
      __builtin_trap();
    if (p.handle.kind == gpu::HandleKind::HostShm && !std::memchr(p.handle.data, 0, sizeof p.handle.data))
      __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
