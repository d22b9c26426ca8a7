// ncclUniqueId layout of the shim (128 bytes, NCCL_UNIQUE_ID_BYTES):
//   [0, 64)    the first 64 bytes of a real NCCL id (NCCL 2.x uses 36: magic + socket address, the
//              rest is zero; ncclGetUniqueId checks that bytes 64.. of the real id are zero and
//              embeds it only then), so that the real NCCL can be initialised with it
//   [64, 72)   magic "PLNKID01": an id without it is a real NCCL id, passed through unchanged
//   [72, 80)   host identity of the caller of ncclGetUniqueId (peerlink::host_id)
//   [80, 96)   random 128-bit nonce: names the job (its peerlink ids derive from it)
//   [96]       flags: bit 0 = a real NCCL id is embedded; bit 1 = a rendezvous address follows;
//              bit 2 = made by ncclCommInitAll (every rank in this process: no meeting needed)
//   [97, 100)  zero
//   [100, 124) the multi-node rendezvous's address (peerlink::RendezvousAddress), when bit 1
//   [124, 128) zero
#pragma once
#include <nccl.h>

#include <cstdint>
#include <string>

#include "peerlink/multinode.h"

namespace peerlink::nccl {

struct IdInfo {
  bool ours = false;        // our magic present
  bool has_real = false;    // a real NCCL id is embedded
  bool has_rendezvous = false;
  bool one_process = false;
  uint64_t host = 0;
  JobNonce nonce{};
  std::string nonce_hex;    // 32 hex digits
  RendezvousAddress rendezvous{};
  ncclUniqueId real{};      // the embedded real id (valid when has_real), zero-padded back to 128
};

JobNonce random_nonce();
// real and rendezvous may be null.
ncclUniqueId make_id(const ncclUniqueId* real, uint64_t host, const JobNonce& nonce,
                     const RendezvousAddress* rendezvous, bool one_process);
IdInfo parse_id(const ncclUniqueId& id);

}  // namespace peerlink::nccl
