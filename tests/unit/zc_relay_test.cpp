// The relay broadcast's cut and copies (src/collectives/zc_relay.h): every byte of the buffer lies
// in exactly one part, parts and chunks are 16-byte multiples with at most kRelayMaxChunks chunks
// (a chunk's flag is an inbox slot: more would index past it), and the copies of all ranks
// together write every non-root's recvbuf whole, once, and stay inside the windows (a window too
// small is refused with its id, nothing planned).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/zc_relay.h"

using namespace peerlink::coll;

namespace {
CollDesc broadcast_desc(int rank, int world, int root, size_t elem, size_t count) {
  CollDesc d;
  d.kind = kBroadcast;
  d.rank = rank;
  d.world = world;
  d.root = root;
  d.elem = elem;
  d.count = count;
  return d;
}
}  // namespace

TEST(ZcRelay, SplitCoversTheBufferInFewEnoughChunks) {
  for (int world = 3; world <= kMaxRanks; ++world) {
    for (size_t bytes : {size_t(1), size_t(15), size_t(16), size_t(4097), size_t(1) << 20, (size_t(128) << 20) + 6,
                         size_t(64) << 30}) {
      const RelaySplit s = relay_split(bytes, world);
      EXPECT_EQ(s.part % 16, 0u);
      EXPECT_EQ(s.chunk % 16, 0u);
      EXPECT_GE(s.part * size_t(world - 1), bytes) << "world " << world << " bytes " << bytes;
      EXPECT_LE((s.part + s.chunk - 1) / s.chunk, kRelayMaxChunks) << "world " << world << " bytes " << bytes;
    }
  }
}

// Every rank's plan for one broadcast, applied to fake address spaces (one window per rank, base
// i << 40): each byte of each non-root's recvbuf is written exactly once, by the root or a forward.
TEST(ZcRelay, PlansOfAllRanksWriteEveryNonRootOnce) {
  const int world = 4, root = 2;
  const size_t count = 100003, elem = 2, off = 64, B = count * elem;
  Window w;
  w.id = 7;
  for (int p = 0; p < world; ++p) {
    w.peer_base[p] = reinterpret_cast<char*>(uintptr_t(p + 1) << 40);
    w.peer_bytes[p] = off + B;
  }
  std::vector<std::vector<int>> hits(world, std::vector<int>(B, 0));
  for (int r = 0; r < world; ++r) {
    Window& mine = w;  // (not copyable: it owns the mappings)
    mine.base = w.peer_base[r];
    const CollDesc d = broadcast_desc(r, world, root, elem, count);
    ZcRelayArgs a;
    char* dst = mine.base + off;
    ASSERT_EQ(relay_plan(d, mine, r == root ? dst : nullptr, dst, &a), "");
    EXPECT_EQ(a.is_root, r == root);
    EXPECT_EQ(a.own_bytes, 0u);  // in place at the root
    for (int i = 0; i < a.n; ++i) {
      const int p = a.to_rank[i];
      ASSERT_NE(p, r);
      ASSERT_NE(p, root);
      const uintptr_t at = reinterpret_cast<uintptr_t>(a.to[i]) - reinterpret_cast<uintptr_t>(w.peer_base[p]) - off;
      ASSERT_LE(at + a.bytes[i], B);
      // What is sent is the same range of the sender's own buffer.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(a.from[i]) - reinterpret_cast<uintptr_t>(dst), at);
      for (size_t k = 0; k < a.bytes[i]; ++k) ++hits[p][at + k];
    }
  }
  for (int p = 0; p < world; ++p) {
    if (p == root) continue;
    for (size_t k = 0; k < B; ++k) ASSERT_EQ(hits[p][k], 1) << "rank " << p << " byte " << k;
  }
}

TEST(ZcRelay, AWindowTooSmallIsRefusedWithNothingPlanned) {
  Window w;
  w.id = 9;
  for (int p = 0; p < 3; ++p) {
    w.peer_base[p] = reinterpret_cast<char*>(uintptr_t(p + 1) << 40);
    w.peer_bytes[p] = 4096;
  }
  w.peer_bytes[1] = 1000;  // rank 1 registered less
  w.base = w.peer_base[0];
  const CollDesc d = broadcast_desc(0, 3, 0, 1, 4096);
  ZcRelayArgs a;
  const std::string e = relay_plan(d, w, w.base, w.base, &a);
  EXPECT_NE(e.find("rank 1's window 9 has 1000 bytes"), std::string::npos) << e;
  EXPECT_EQ(a.n, 0);
}
