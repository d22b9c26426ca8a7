#include "gpu/chunks.h"

#include <cstring>

#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::gpu {

using common::cat;

std::vector<Chunk> walk_chunks(uint64_t p, uint64_t len, const ChunkQuery& query, size_t max_chunks) {
  auto range = [&] { return cat("range [0x", std::hex, p, ", +0x", len, ")"); };
  if (len == 0 || p > UINT64_MAX - len) throw InvalidArgument(cat(range(), " is empty or wraps"));
  const uint64_t end = p + len;
  std::vector<Chunk> out;
  uint64_t at = p;
  while (at < end) {
    Chunk c;
    if (!query(at, &c)) {
      if (out.empty()) throw InvalidArgument(cat(range(), ": nothing is mapped at its start"));
      throw InvalidArgument(cat(range(), " straddles unmapped memory at 0x", std::hex, at,
                                " (the range covers more than one allocation)"));
    }
    if (c.size == 0 || c.base > at || c.base > UINT64_MAX - c.size || c.base + c.size <= at)
      throw InvalidArgument(cat(range(), ": the allocation reported for 0x", std::hex, at, " ([0x", c.base, ", +0x",
                                c.size, ")) does not contain it"));
    if (!out.empty() && c.base != at)
      throw InvalidArgument(cat(range(), " straddles two unrelated allocations at 0x", std::hex, at));
    if (out.size() == max_chunks)
      throw UnsupportedError(cat(range(), " spans more than ", std::dec, max_chunks,
                                 " physical allocations; publish a smaller buffer"));
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
    return Error(cat("manifest of export ", export_id, " rejected: ", why));
  };
  if (nchunks == 0 || nchunks > kMaxManifestChunks) throw bad(cat("chunk count ", nchunks, " out of range"));
  if (n != sizeof(ManifestHeader) + size_t(nchunks) * sizeof(ManifestEntry))
    throw bad(cat(n, " bytes for ", nchunks, " chunks"));
  ManifestHeader h;
  std::memcpy(&h, bytes, sizeof h);
  if (h.magic != kManifestMagic || h.nchunks != nchunks || h.export_id != export_id || h.total_bytes != total_bytes)
    throw bad(cat("header (magic ", h.magic, ", ", h.nchunks, " chunks, export ", h.export_id, ", ", h.total_bytes,
                  " bytes) does not match what the handle claims (", nchunks, " chunks, ", total_bytes, " bytes)"));
  std::vector<ManifestEntry> e(nchunks);
  std::memcpy(e.data(), bytes + sizeof h, nchunks * sizeof(ManifestEntry));
  uint64_t sum = 0;
  for (uint32_t i = 0; i < nchunks; ++i) {
    if (e[i].size == 0 || e[i].fd < 0 || e[i].size > UINT64_MAX - sum)
      throw bad(cat("chunk ", i, ": size ", e[i].size, ", descriptor ", e[i].fd));
    sum += e[i].size;
  }
  if (sum != total_bytes) throw bad(cat("chunks sum to ", sum, " bytes, not ", total_bytes));
  return e;
}

}  // namespace peerlink::gpu
