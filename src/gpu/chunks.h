// The physical chunks behind a virtual range, and the manifest that describes an export by file
// descriptor. Pure functions (no GPU, no OS calls) so CI tests them directly.
//
// A VMM range (cuMemAddressReserve + cuMemMap; PyTorch expandable segments) is many physical
// allocations ("chunks") mapped back to back. cuMemGetAddressRange on such memory answers with the
// single chunk that contains the address, not the reservation, so the walk asks chunk by chunk:
// the chunk holding p, then the chunk at its end, until [p, p+len) is covered. A hole, or a chunk
// that does not start where the previous one ends, means the range straddles unrelated memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace peerlink::gpu {

// One physical allocation mapped at [base, base + size). `id` identifies the physical allocation
// (the driver's allocation handle; the host backend's chunk serial) so that a chunk freed and
// replaced at the same address is seen as different.
struct Chunk {
  uint64_t base = 0;
  uint64_t size = 0;
  uint64_t id = 0;
  bool operator==(const Chunk& o) const { return base == o.base && size == o.size && id == o.id; }
};

// Fills *out with the chunk containing `addr`; false when nothing is mapped there.
using ChunkQuery = std::function<bool(uint64_t addr, Chunk* out)>;

// The chunks covering [p, p + len), in address order, each starting where the previous ends (the
// first may start before p, the last end after p + len). Throws InvalidArgument naming the range:
// len 0 or wrapping, nothing mapped at p, a hole, a non-adjacent chunk (two unrelated allocations),
// a query answer that does not contain the address asked about; UnsupportedError beyond max_chunks.
std::vector<Chunk> walk_chunks(uint64_t p, uint64_t len, const ChunkQuery& query, size_t max_chunks);

// ---- Manifest: what the exporter writes into a sealed memfd that travels with the chunk fds.
constexpr uint32_t kManifestMagic = 0x504c4d46;  // "FMLP"
constexpr uint32_t kMaxManifestChunks = 248;      // + the manifest itself within one SCM_RIGHTS message
struct ManifestHeader {
  uint32_t magic;
  uint32_t nchunks;
  uint64_t export_id;
  uint64_t total_bytes;
};
struct ManifestEntry {
  uint64_t size;     // bytes this chunk maps
  uint64_t dev;      // FileId of the chunk's descriptor in the exporter (fstat)
  uint64_t ino;
  int32_t fd;        // descriptor number in the exporter (pidfd_getfd)
  uint32_t reserved;
};
static_assert(sizeof(ManifestHeader) == 24 && sizeof(ManifestEntry) == 32, "manifest layout is a wire format");

std::vector<unsigned char> encode_manifest(uint64_t export_id, const std::vector<ManifestEntry>& entries);
// Validates untrusted bytes: magic, export id and chunk count as the handle says, sizes > 0 and
// summing (without overflow) to total_bytes, descriptors >= 0. Throws Error naming the defect.
std::vector<ManifestEntry> parse_manifest(const unsigned char* bytes, size_t n, uint64_t export_id, uint32_t nchunks,
                                          uint64_t total_bytes);

}  // namespace peerlink::gpu
