// The collectives' scratch geometry (collectives/layout.h) with an LL128 area, and the moving kinds'
// description of an incoming piece (coll_plan.h move_target), both pure arithmetic shared by the
// host code and the kernels.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "collectives/coll_plan.h"
#include "collectives/layout.h"

namespace peerlink::coll {
namespace {

TEST(CollLayout, Ll128AreaIsAlignedAfterTheOthersAndEndsTheAllocation) {
  EXPECT_EQ(ll128_lines(0), 0u);
  EXPECT_EQ(ll128_lines(1), 1u);
  EXPECT_EQ(ll128_lines(120), 1u);
  EXPECT_EQ(ll128_lines(121), 2u);
  EXPECT_EQ(ll128_lines(size_t(4) << 20), 34953u);
  for (int world : {1, 2, 3, 5, 8})
    for (size_t cap : {size_t(64), size_t(192), size_t(1) << 20})
      for (size_t ll_cap : {size_t(0), size_t(32), size_t(96), size_t(1) << 20}) {
        DataLayout L;
        L.world = world;
        L.cap = cap;
        L.ll_cap = ll_cap;
        const size_t without = L.total();
        EXPECT_EQ(without, 2 * L.slot_bytes() + 2 * size_t(world) * ll_cap);  // no LL128: as before
        L.ll128_cap = ll128_lines(size_t(1) << 20) * kLl128Line;
        const size_t end_ll = L.ll(1, world - 1) + ll_cap;
        EXPECT_EQ(L.ll128_base() % kLl128Line, 0u) << world << " " << cap << " " << ll_cap;
        EXPECT_GE(L.ll128_base(), end_ll);
        EXPECT_LT(L.ll128_base(), end_ll + kLl128Line);
        EXPECT_EQ(L.ll128(0, 0), L.ll128_base());
        for (int slot = 0; slot < 2; ++slot)
          for (int pos = 0; pos < world; ++pos) EXPECT_EQ(L.ll128(slot, pos) % kLl128Line, 0u);
        EXPECT_EQ(L.ll128(1, world - 1) + L.ll128_cap, L.total());
      }
}

CollDesc desc(int kind, int rank, int world, size_t count, int root = 0) {
  CollDesc d;
  d.kind = kind;
  d.rank = rank;
  d.world = world;
  d.count = count;
  d.elem = 4;
  d.root = root;
  return d;
}

TEST(CollLayout, MoveTargetOfTheMovingKinds) {
  std::vector<char> src(4096), dst(4096);
  // all_gather, rank 1 of 3, 10 elements: our own piece is copied to dst + 40 unless already there.
  CollDesc d = desc(kAllGather, 1, 3, 10);
  MoveTarget t = move_target(d, 1, kAllGather, src.data(), dst.data());
  EXPECT_EQ(t.in, src.data());
  EXPECT_EQ(t.out, dst.data() + 40);
  EXPECT_EQ(t.bytes, 40u);
  EXPECT_FALSE(t.skip || t.token);
  t = move_target(d, 1, kAllGather, dst.data() + 40, dst.data());  // in place
  EXPECT_TRUE(t.skip);
  t = move_target(d, 2, kAllGather, src.data(), dst.data());  // a peer's piece: read from its lines
  EXPECT_EQ(t.in, nullptr);
  EXPECT_EQ(t.out, dst.data() + 80);
  EXPECT_FALSE(t.skip || t.token);
  // broadcast from root 0, seen by rank 2: nothing comes from rank 1 (a token), rank 0's piece does.
  d = desc(kBroadcast, 2, 3, 10, 0);
  EXPECT_TRUE(move_target(d, 1, kBroadcast, src.data(), dst.data()).token);
  t = move_target(d, 0, kBroadcast, src.data(), dst.data());
  EXPECT_FALSE(t.token || t.skip);
  EXPECT_EQ(t.bytes, 40u);
  EXPECT_TRUE(move_target(d, 2, kBroadcast, src.data(), dst.data()).skip);  // a non-root's own: empty
  // all_to_all in place: our own piece stays; alignment follows both pointers.
  d = desc(kAllToAll, 0, 2, 10);
  EXPECT_TRUE(move_target(d, 0, kAllToAll, dst.data(), dst.data()).skip);
  EXPECT_TRUE(move_target(d, 1, kAllToAll, src.data(), dst.data()).aligned8);
  EXPECT_FALSE(move_target(d, 0, kAllToAll, src.data() + 4, dst.data()).aligned8);
}

}  // namespace
}  // namespace peerlink::coll
