// libFuzzer target: the export manifest an importer reads from a peer's memfd (gpu/chunks.h
// parse_manifest). Input: 4 bytes chunk count, 8 bytes total bytes, then the manifest bytes (the
// export id is taken from the manifest's own header when long enough, so matching headers reach
// the per-chunk checks). An accepted manifest must satisfy every documented bound.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "gpu/chunks.h"
#include "peerlink/errors.h"

using namespace peerlink::gpu;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 12) return 0;
  uint32_t n;
  uint64_t total;
  std::memcpy(&n, data, 4);
  std::memcpy(&total, data + 4, 8);
  const uint8_t* m = data + 12;
  size_t len = size - 12;
  uint64_t export_id = 0;
  if (len >= sizeof(ManifestHeader)) std::memcpy(&export_id, m + 8, 8);
  try {
    auto e = parse_manifest(m, len, export_id, n, total);
    uint64_t sum = 0;
    if (e.size() != n || n == 0 || n > kMaxManifestChunks) std::abort();
    for (const auto& c : e) {
      if (c.size == 0 || c.fd < 0 || c.size > UINT64_MAX - sum) std::abort();
      sum += c.size;
    }
    if (sum != total) std::abort();
  } catch (const peerlink::Error&) {
  }
  return 0;
}
