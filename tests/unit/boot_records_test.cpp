// Unit tests of bootstrap's rendezvous records (bootstrap/records.h): slots carry liveness only
// (the transport's join data is its own record) and the layout header names the
// version, so a rank of an older layout is refused with a typed error, never misread.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "bootstrap/bootstrap.h"
#include "bootstrap/records.h"
#include "peerlink/errors.h"

using namespace peerlink;
using namespace peerlink::bootstrap;

TEST(BootRecords, SlotIsLivenessOnly) {
  static_assert(sizeof(RankSlot) == 64, "one cache line per rank");
  std::unique_ptr<RankSlot> s(new RankSlot());
  s->state.store(kJoined);
  s->pid = 4321;
  s->start_time = 99;
  s->barrier_count.store(7);
  SlotRecord r = parse_slot(s.get(), sizeof(RankSlot), 1, 2);
  EXPECT_EQ(r.state, uint32_t(kJoined));
  EXPECT_EQ(r.pid, 4321);
  EXPECT_EQ(r.start_time, 99u);
  EXPECT_EQ(r.barrier_count, 7u);
}

TEST(BootRecords, CorruptSlotsAreTypedErrors) {
  std::unique_ptr<RankSlot> s(new RankSlot());
  s->state.store(77);
  EXPECT_THROW(parse_slot(s.get(), sizeof(RankSlot), 0, 2), Error);
  s->state.store(kLeft);
  s->pid = 0;
  EXPECT_THROW(parse_slot(s.get(), sizeof(RankSlot), 0, 2), Error);
  s->state.store(kEmpty);
  EXPECT_NO_THROW(parse_slot(s.get(), sizeof(RankSlot), 0, 2));
  EXPECT_THROW(parse_slot(s.get(), sizeof(RankSlot) - 1, 0, 2), Error);
  EXPECT_THROW(parse_slot(s.get(), sizeof(RankSlot), 2, 2), InvalidArgument);
}

TEST(BootRecords, LayoutHeaderNamesVersionAndWorldSize) {
  uint32_t hdr[2] = {2, kLayoutVersion};
  EXPECT_NO_THROW(check_layout_header(hdr, sizeof hdr, 2, kLayoutVersion));
  EXPECT_THROW(check_layout_header(hdr, sizeof hdr, 3, kLayoutVersion), InvalidArgument);
  hdr[1] = 2;  // the layout with the transport's fields in it
  try {
    check_layout_header(hdr, sizeof hdr, 2, kLayoutVersion);
    FAIL() << "old layout accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layout version 2, expected 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_layout_header(hdr, 7, 2, kLayoutVersion), Error);
}

// The failure record a late rank acts on comes from shared memory: only a recorded failure naming
// two different ranks of the world and a positive pid is believed.
TEST(BootRecords, FailureRecordIsChecked) {
  std::unique_ptr<FailureRecord> f(new FailureRecord());
  EXPECT_FALSE(parse_failure(f.get(), sizeof(FailureRecord), 3).recorded());
  f->state.store(kFailureRecorded);
  f->dead_rank = 1;
  f->dead_pid = 4321;
  f->seen_by = 0;
  f->when_ticks = 55;
  FailureView v = parse_failure(f.get(), sizeof(FailureRecord), 3);
  EXPECT_TRUE(v.recorded());
  EXPECT_EQ(v.dead_rank, 1);
  EXPECT_EQ(v.dead_pid, 4321);
  EXPECT_EQ(v.seen_by, 0);
  EXPECT_EQ(v.when_ticks, 55u);
  EXPECT_THROW(parse_failure(f.get(), sizeof(FailureRecord) - 1, 3), Error);
  EXPECT_THROW(parse_failure(f.get(), sizeof(FailureRecord), 1), Error);  // dead rank outside the world
  f->seen_by = 1;
  EXPECT_THROW(parse_failure(f.get(), sizeof(FailureRecord), 3), Error);  // saw itself die
  f->seen_by = 0;
  f->dead_pid = 0;
  EXPECT_THROW(parse_failure(f.get(), sizeof(FailureRecord), 3), Error);
  f->state.store(9);
  EXPECT_THROW(parse_failure(f.get(), sizeof(FailureRecord), 3), Error);
  f->state.store(kFailureRecording);  // being written: not a failure yet, whatever the fields say
  EXPECT_FALSE(parse_failure(f.get(), sizeof(FailureRecord), 3).recorded());
}
