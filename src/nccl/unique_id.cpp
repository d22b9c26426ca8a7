// ncclUniqueId layout (unique_id.h).
#include "unique_id.h"

#include <sys/random.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

namespace peerlink::nccl {
namespace {

constexpr char kMagic[8] = {'P', 'L', 'N', 'K', 'I', 'D', '0', '1'};
constexpr size_t kRealBytes = 64, kMagicAt = 64, kHostAt = 72, kNonceAt = 80, kFlagsAt = 96, kRendezvousAt = 100;
static_assert(kRendezvousAt + kRendezvousAddressBytes <= NCCL_UNIQUE_ID_BYTES, "the address fits in the id");
constexpr char kFlagReal = 1, kFlagRendezvous = 2, kFlagOneProcess = 4;

}  // namespace

JobNonce random_nonce() {
  JobNonce nonce;
  if (getrandom(nonce.data(), nonce.size(), 0) != static_cast<ssize_t>(nonce.size())) {
    // No entropy source: time + pid + address, still distinct per call in practice.
    std::seed_seq seq{static_cast<unsigned>(getpid()),
                      static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()),
                      static_cast<unsigned>(reinterpret_cast<uintptr_t>(&nonce))};
    std::mt19937_64 g(seq);
    for (auto& b : nonce) b = static_cast<uint8_t>(g());
  }
  return nonce;
}

ncclUniqueId make_id(const ncclUniqueId* real, uint64_t host, const JobNonce& nonce,
                     const RendezvousAddress* rendezvous, bool one_process) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (real) {
    bool fits = true;
    for (size_t i = kRealBytes; i < sizeof real->internal; ++i) fits = fits && real->internal[i] == 0;
    if (fits) {
      std::memcpy(id.internal, real->internal, kRealBytes);
      id.internal[kFlagsAt] |= kFlagReal;
    }
  }
  std::memcpy(id.internal + kMagicAt, kMagic, sizeof kMagic);
  std::memcpy(id.internal + kHostAt, &host, sizeof host);
  std::memcpy(id.internal + kNonceAt, nonce.data(), nonce.size());
  if (rendezvous) {
    std::memcpy(id.internal + kRendezvousAt, rendezvous->data(), rendezvous->size());
    id.internal[kFlagsAt] |= kFlagRendezvous;
  }
  if (one_process) id.internal[kFlagsAt] |= kFlagOneProcess;
  return id;
}

IdInfo parse_id(const ncclUniqueId& id) {
  IdInfo info;
  if (std::memcmp(id.internal + kMagicAt, kMagic, sizeof kMagic) != 0) return info;
  info.ours = true;
  std::memcpy(&info.host, id.internal + kHostAt, sizeof info.host);
  std::memcpy(info.nonce.data(), id.internal + kNonceAt, info.nonce.size());
  char hex[33];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", info.nonce[i]);
  info.nonce_hex = hex;
  const char flags = id.internal[kFlagsAt];
  info.has_real = (flags & kFlagReal) != 0;
  info.has_rendezvous = (flags & kFlagRendezvous) != 0;
  info.one_process = (flags & kFlagOneProcess) != 0;
  if (info.has_rendezvous) std::memcpy(info.rendezvous.data(), id.internal + kRendezvousAt, info.rendezvous.size());
  std::memset(&info.real, 0, sizeof info.real);
  if (info.has_real) std::memcpy(info.real.internal, id.internal, kRealBytes);
  return info;
}

}  // namespace peerlink::nccl
