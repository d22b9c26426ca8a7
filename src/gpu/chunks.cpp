#include "gpu/chunks.h"

#include <cstring>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::gpu {

std::vector<Chunk> walk_chunks(uint64_t p, uint64_t len, const ChunkQuery& query, size_t max_chunks) {
  auto range = [&] { return common::format("range [0x{:x}, +0x{:x})", p, len); };
  if (len == 0 || p > UINT64_MAX - len) throw InvalidArgument(common::format("{} is empty or wraps", range()));
  const uint64_t end = p + len;
  std::vector<Chunk> out;
  uint64_t at = p;
  while (at < end) {
    Chunk c;
    if (!query(at, &c)) {
      if (out.empty()) throw InvalidArgument(common::format("{}: nothing is mapped at its start", range()));
      throw InvalidArgument(common::format(
          "{} straddles unmapped memory at 0x{:x} (the range covers more than one allocation)", range(), at));
    }
    if (c.size == 0 || c.base > at || c.base > UINT64_MAX - c.size || c.base + c.size <= at)
      throw InvalidArgument(
          common::format("{}: the allocation reported for 0x{:x} ([0x{:x}, +0x{:x})) does not contain it", range(), at,
                         c.base, c.size));
    if (!out.empty() && c.base != at)
      throw InvalidArgument(common::format("{} straddles two unrelated allocations at 0x{:x}", range(), at));
    if (out.size() == max_chunks)
      throw UnsupportedError(
          common::format("{} spans more than {} physical allocations; publish a smaller buffer", range(), max_chunks));
    out.push_back(c);
    at = c.base + c.size;
  }
  return out;
}

std::vector<unsigned char> encode_manifest(uint64_t export_id, const std::vector<ManifestEntry>& entries) {
  ManifestHeader h{kManifestMagic, static_cast<uint32_t>(entries.size()), export_id, 0};
  for (const auto& e : entries) h.total_bytes += e.size;
  std::vector<unsigned char> b(sizeof h + entries.size() * sizeof(ManifestEntry));
  std::memcpy(b.data(), &h, sizeof h);
  if (!entries.empty()) std::memcpy(b.data() + sizeof h, entries.data(), entries.size() * sizeof(ManifestEntry));
  return b;
}

std::vector<ManifestEntry> parse_manifest(const unsigned char* bytes, size_t n, uint64_t export_id, uint32_t nchunks,
                                          uint64_t total_bytes) {
  auto bad = [&](const std::string& why) {
    return Error(common::format("manifest of export {} rejected: {}", export_id, why));
  };
  if (nchunks == 0 || nchunks > kMaxManifestChunks) throw bad(common::format("chunk count {} out of range", nchunks));
  if (n != sizeof(ManifestHeader) + size_t(nchunks) * sizeof(ManifestEntry))
    throw bad(common::format("{} bytes for {} chunks", n, nchunks));
  ManifestHeader h;
  std::memcpy(&h, bytes, sizeof h);
  if (h.magic != kManifestMagic || h.nchunks != nchunks || h.export_id != export_id || h.total_bytes != total_bytes)
    throw bad(common::format(
        "header (magic {}, {} chunks, export {}, {} bytes) does not match what the handle claims ({} chunks, {} bytes)",
        h.magic, h.nchunks, h.export_id, h.total_bytes, nchunks, total_bytes));
  std::vector<ManifestEntry> e(nchunks);
  std::memcpy(e.data(), bytes + sizeof h, nchunks * sizeof(ManifestEntry));
  uint64_t sum = 0;
  for (uint32_t i = 0; i < nchunks; ++i) {
    if (e[i].size == 0 || e[i].fd < 0 || e[i].size > UINT64_MAX - sum)
      throw bad(common::format("chunk {}: size {}, descriptor {}", i, e[i].size, e[i].fd));
    sum += e[i].size;
  }
  if (sum != total_bytes) throw bad(common::format("chunks sum to {} bytes, not {}", sum, total_bytes));
  return e;
}

}  // namespace peerlink::gpu
