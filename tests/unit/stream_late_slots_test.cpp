// The NCCL-form receiver's late slot hand-back (stream::late_from, stream_layout.h): which chunks of
// a launch give their staging slot back only at the channel's next launch. The kernels rely on
// these properties for progress (a slot the sender needs within the launch is never late) and for
// the next launch's hand-back (one thread per late chunk, each slot at most once).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "stream/stream_layout.h"

using peerlink::stream::late_from;

namespace {

void check_launch(uint64_t g0, uint64_t run, uint64_t slots) {
  SCOPED_TRACE(testing::Message() << "g0 " << g0 << " run " << run << " slots " << slots);
  const uint64_t g_last = g0 + run - 1;
  const uint64_t defer = late_from(g0, g_last, run, slots);
  ASSERT_GE(defer, g0);
  ASSERT_LE(defer, g_last);  // the last chunk is always late
  std::set<uint64_t> late_slots;
  for (uint64_t g = defer; g <= g_last; ++g) {
    EXPECT_GT(g + slots, g_last) << "late chunk " << g << " has its slot reused within the launch";
    EXPECT_TRUE(late_slots.insert(g % slots).second) << "slot " << g % slots << " late twice";
  }
  EXPECT_LE(g_last - defer + 1, slots);
  // A next launch of the same run waits for no late slot but g_last's (late before this rule too;
  // only a run of at least `slots` chunks reaches it): its chunk h needs chunk h - slots handed back.
  for (uint64_t h = g_last + 1; h <= g_last + run; ++h) {
    if (h < slots) continue;
    const uint64_t prev = h - slots;
    EXPECT_TRUE(prev < defer || prev >= g_last) << "next launch's chunk " << h << " waits for late chunk " << prev;
  }
  // Every chunk whose slot is not needed before the launch after next is late when the run is at
  // most half the slots (the measured case: small messages hand nothing back mid-launch).
  if (2 * run <= slots) {
    EXPECT_EQ(defer, g0);
  }
}

}  // namespace

TEST(StreamLateSlots, PropertiesOverRunsAndStarts) {
  for (uint64_t slots : {4ull, 8ull, 64ull})
    for (uint64_t run = 1; run <= 3 * slots + 1; ++run)
      for (uint64_t g0 : {uint64_t(0), uint64_t(1), slots - 1, slots, 5 * slots + 3, uint64_t(1) << 40})
        check_launch(g0, run, slots);
}

TEST(StreamLateSlots, MeasuredShapes) {
  // 64 slots (GPU): one 8 KB LL piece, 16 pieces (128 KB), 64 pieces (512 KB: the next message
  // reuses every slot, so only the last is late), 128 staged chunks (16 MB).
  EXPECT_EQ(late_from(100, 100, 1, 64), 100u);
  EXPECT_EQ(late_from(100, 115, 16, 64), 100u);
  EXPECT_EQ(late_from(100, 163, 64, 64), 163u);
  EXPECT_EQ(late_from(100, 227, 128, 64), 227u);
  EXPECT_EQ(late_from(100, 147, 48, 64), 132u);  // 48 chunks: the last 16 late
}
