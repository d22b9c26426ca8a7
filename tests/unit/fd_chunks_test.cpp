// The chunk walk behind VMM exports (gpu/chunks.h) and the export manifest parser: pure functions,
// tested without a GPU. A "memory map" here is a list of chunks; the query answers like
// cuMemGetAddressRange + cuMemRetainAllocationHandle would on a VMM range.
#include <gtest/gtest.h>

#include "gpu/chunks.h"
#include "peerlink/errors.h"

using namespace peerlink;
using namespace peerlink::gpu;

namespace {

ChunkQuery map_of(std::vector<Chunk> chunks) {
  return [chunks](uint64_t a, Chunk* out) {
    for (const auto& c : chunks)
      if (a >= c.base && a < c.base + c.size) return *out = c, true;
    return false;
  };
}

// An expandable segment: 5 chunks of 2 MiB back to back at 0x100000000.
constexpr uint64_t kMiB = 1 << 20;
std::vector<Chunk> segment() {
  std::vector<Chunk> v;
  for (uint64_t i = 0; i < 5; ++i) v.push_back(Chunk{0x100000000ull + i * 2 * kMiB, 2 * kMiB, 100 + i});
  return v;
}

TEST(ChunkWalk, RangeInsideOneChunk) {
  auto v = walk_chunks(0x100000000ull + 4096, 100, map_of(segment()), 16);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].id, 100u);
}

TEST(ChunkWalk, PartialFirstAndLastChunk) {
  // Starts 1 MiB into chunk 1, ends 1 byte into chunk 3: chunks 1, 2, 3.
  uint64_t p = 0x100000000ull + 3 * kMiB;
  uint64_t end = 0x100000000ull + 6 * kMiB + 1;
  auto v = walk_chunks(p, end - p, map_of(segment()), 16);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].id, 101u);
  EXPECT_EQ(v[2].id, 103u);
  EXPECT_EQ(v[0].base + v[0].size, v[1].base);
}

TEST(ChunkWalk, ExactChunkBoundariesDoNotPullNeighbours) {
  auto v = walk_chunks(0x100000000ull + 2 * kMiB, 2 * kMiB, map_of(segment()), 16);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].id, 101u);
  EXPECT_EQ(walk_chunks(0x100000000ull, 10 * kMiB, map_of(segment()), 16).size(), 5u);
}

TEST(ChunkWalk, ReuseAfterFreeIsANewChunkList) {
  auto before = walk_chunks(0x100000000ull, 4 * kMiB, map_of(segment()), 16);
  auto s = segment();
  s[1].id = 999;  // chunk 1 freed and a new physical allocation mapped at the same address
  auto after = walk_chunks(0x100000000ull, 4 * kMiB, map_of(s), 16);
  EXPECT_FALSE(before == after);
  EXPECT_EQ(after[1].id, 999u);
}

TEST(ChunkWalk, StraddlingAHoleOrAnUnrelatedAllocationIsInvalid) {
  auto s = segment();
  s.erase(s.begin() + 2);  // hole at chunk 2
  try {
    walk_chunks(0x100000000ull, 6 * kMiB, map_of(s), 16);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("straddles"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0x100000000"), std::string::npos) << e.what();  // names the range
  }
  // A query answering with a chunk that overlaps but does not start where the previous ended.
  auto weird = [](uint64_t a, Chunk* out) {
    *out = a < 0x2000 ? Chunk{0x1000, 0x1000, 1} : Chunk{0x1800, 0x1000, 2};
    return true;
  };
  EXPECT_THROW(walk_chunks(0x1000, 0x1800, weird, 16), InvalidArgument);
}

TEST(ChunkWalk, BadAnswersAndLimits) {
  EXPECT_THROW(walk_chunks(0x5000, 16, map_of(segment()), 16), InvalidArgument);    // nothing mapped
  EXPECT_THROW(walk_chunks(0x100000000ull, 0, map_of(segment()), 16), InvalidArgument);  // empty
  EXPECT_THROW(walk_chunks(UINT64_MAX - 4, 16, map_of(segment()), 16), InvalidArgument);  // wraps
  auto liar = [](uint64_t, Chunk* out) { return *out = Chunk{0x9000, 0x1000, 1}, true; };  // not containing
  EXPECT_THROW(walk_chunks(0x1000, 16, liar, 16), InvalidArgument);
  auto zero = [](uint64_t a, Chunk* out) { return *out = Chunk{a, 0, 1}, true; };
  EXPECT_THROW(walk_chunks(0x1000, 16, zero, 16), InvalidArgument);
  EXPECT_THROW(walk_chunks(0x100000000ull, 10 * kMiB, map_of(segment()), 4), UnsupportedError);
}

TEST(Manifest, RoundTripAndRejections) {
  std::vector<ManifestEntry> e{{8192, 1, 2, 5, 0}, {4096, 1, 3, 6, 0}};
  auto b = encode_manifest(7, e);
  auto back = parse_manifest(b.data(), b.size(), 7, 2, 12288);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].fd, 6);
  EXPECT_THROW(parse_manifest(b.data(), b.size(), 8, 2, 12288), Error);      // other export
  EXPECT_THROW(parse_manifest(b.data(), b.size(), 7, 2, 12289), Error);      // other size
  EXPECT_THROW(parse_manifest(b.data(), b.size() - 1, 7, 2, 12288), Error);  // truncated
  EXPECT_THROW(parse_manifest(b.data(), b.size(), 7, 0, 0), Error);
  auto bad = e;
  bad[0].fd = -1;
  auto bb = encode_manifest(7, bad);
  EXPECT_THROW(parse_manifest(bb.data(), bb.size(), 7, 2, 12288), Error);
  bad = e;
  bad[1].size = 0;
  bb = encode_manifest(7, bad);
  EXPECT_THROW(parse_manifest(bb.data(), bb.size(), 7, 2, 8192), Error);
  bad = e;
  bad[0].size = UINT64_MAX;  // sum wraps
  bb = encode_manifest(7, bad);
  EXPECT_THROW(parse_manifest(bb.data(), bb.size(), 7, 2, 4095), Error);
}

}  // namespace
