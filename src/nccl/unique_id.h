// ncclUniqueId layout of the shim (128 bytes, NCCL_UNIQUE_ID_BYTES):
//   [0, 64)    the first 64 bytes of a real NCCL id (NCCL 2.x uses 36: magic + socket address, the
//              rest is zero; ncclGetUniqueId checks that bytes 64.. of the real id are zero and
//              embeds it only then), so that ranks routed to the real NCCL can initialise it
//   [64, 72)   magic "PLNKID01": an id without it is a real NCCL id, passed through unchanged
//   [72, 80)   host identity of the caller of ncclGetUniqueId (FNV-1a of hostname + boot id)
//   [80, 96)   random 128-bit nonce: the peerlink communicator's unique id (hex)
//   [96]       flags: bit 0 = a real NCCL id is embedded
//   [97, 128)  zero
#pragma once
#include <nccl.h>

#include <cstdint>
#include <string>

namespace peerlink::nccl {

struct IdInfo {
  bool ours = false;       // our magic present
  bool has_real = false;   // a real NCCL id is embedded
  uint64_t host = 0;
  std::string nonce_hex;   // 32 hex digits
  ncclUniqueId real{};     // the embedded real id (valid when has_real), zero-padded back to 128
};

uint64_t this_host_id();
ncclUniqueId make_id(const ncclUniqueId* real);  // real may be null
IdInfo parse_id(const ncclUniqueId& id);

}  // namespace peerlink::nccl
