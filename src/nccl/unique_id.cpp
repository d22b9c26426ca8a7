// ncclUniqueId layout (unique_id.h).
#include "unique_id.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

namespace peerlink::nccl {
namespace {

constexpr char kMagic[8] = {'P', 'L', 'N', 'K', 'I', 'D', '0', '1'};
constexpr size_t kRealBytes = 64, kMagicAt = 64, kHostAt = 72, kNonceAt = 80, kFlagsAt = 96;

uint64_t fnv(uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace

uint64_t this_host_id() {
  // Hostname alone can repeat across containers of different machines; the boot id cannot.
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return fnv(fnv(1469598103934665603ULL, host), boot);
}

ncclUniqueId make_id(const ncclUniqueId* real) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (real) {
    bool fits = true;
    for (size_t i = kRealBytes; i < sizeof real->internal; ++i) fits = fits && real->internal[i] == 0;
    if (fits) {
      std::memcpy(id.internal, real->internal, kRealBytes);
      id.internal[kFlagsAt] = 1;
    }
  }
  std::memcpy(id.internal + kMagicAt, kMagic, sizeof kMagic);
  uint64_t host = this_host_id();
  std::memcpy(id.internal + kHostAt, &host, sizeof host);
  unsigned char nonce[16];
  if (getrandom(nonce, sizeof nonce, 0) != static_cast<ssize_t>(sizeof nonce)) {
    // No entropy source: time + pid + address, still distinct per call in practice.
    std::seed_seq seq{static_cast<unsigned>(getpid()),
                      static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()),
                      static_cast<unsigned>(reinterpret_cast<uintptr_t>(&id))};
    std::mt19937_64 g(seq);
    for (auto& b : nonce) b = static_cast<unsigned char>(g());
  }
  std::memcpy(id.internal + kNonceAt, nonce, sizeof nonce);
  return id;
}

IdInfo parse_id(const ncclUniqueId& id) {
  IdInfo info;
  if (std::memcmp(id.internal + kMagicAt, kMagic, sizeof kMagic) != 0) return info;
  info.ours = true;
  std::memcpy(&info.host, id.internal + kHostAt, sizeof info.host);
  char hex[33];
  for (int i = 0; i < 16; ++i)
    std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(id.internal[kNonceAt + i]));
  info.nonce_hex = hex;
  info.has_real = (id.internal[kFlagsAt] & 1) != 0;
  std::memset(&info.real, 0, sizeof info.real);
  if (info.has_real) std::memcpy(info.real.internal, id.internal, kRealBytes);
  return info;
}

}  // namespace peerlink::nccl
