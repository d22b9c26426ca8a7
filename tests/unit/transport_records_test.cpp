// Unit tests of the transport's SHM records: the IPC binding follows the exact record that was
// bounds-checked, revoked publications, posted-irecv records, and the pure parsers
// of wire.h (the fuzz targets' functions) on valid and malformed input.
#include <gtest/gtest.h>

#include <cstring>

#include "gpu/backend.h"
#include "peerlink/errors.h"
#include "support/mp.h"
#include "transport/ipc_manager.h"
#include "transport/registry.h"
#include "transport/wire.h"

using namespace peerlink;
using namespace peerlink::detail;

// A republish that moves the offset (same version, same allocation) must not reuse the cached
// binding's old offset: the pointer written through is the one of the record that was checked.
TEST(IpcCache, BindingFollowsTheCheckedRecordsOffset) {
  std::string job = common::shm_prefix_for(pltest::unique_test_id("ipc7"));
  auto be = gpu::make_backend(-1, job + "r0_");
  auto be1 = gpu::make_backend(-1, job + "r1_");  // the importer, rank 1, binds rank 0's buffers
  IpcManager exporter(*be, common::ProcId{1, 1});  // another "process": opens happen
  IpcManager importer(*be1, common::self_proc_id());
  char* a = static_cast<char*>(be->alloc(8192));
  uint64_t off = 0;
  gpu::MemHandle h = exporter.export_range(a, 8192, &off);
  Publication first{1, 1, 0, 8192, h}, moved{1, 1, 6000, 100, h};
  Binding b1 = importer.bind(0, first);
  Binding b2 = importer.bind(0, moved);
  EXPECT_EQ(b2.ptr - b1.ptr, 6000) << "the cached binding's old offset was reused";
  EXPECT_EQ(b2.len, 100u);
  EXPECT_EQ(importer.counters().opens.load(), 1u);  // same allocation: still one mapping
  b1 = Binding();
  b2 = Binding();
  importer.close_all();
  be->free(a);
}

TEST(Registry, RevokedPublicationIsReadAsRevoked) {
  std::vector<RegSlot> table(kRegSlots);
  Publication p{4, 3, 0, 64, {}};
  p.handle.kind = gpu::HandleKind::HostShm;
  p.handle.alloc_bytes = 4096;
  RegSlot* s = registry_slot_for_write(table.data(), 4);
  registry_write(s, p);
  EXPECT_FALSE(registry_read(table.data(), 4)->revoked);
  registry_revoke(s);
  auto r = registry_read(table.data(), 4);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->revoked);
  EXPECT_EQ(r->version, 3u);
  p.version = 4;
  registry_write(registry_slot_for_write(table.data(), 4), p);  // published again
  EXPECT_FALSE(registry_read(table.data(), 4)->revoked);
}

TEST(Registry, PostedRecvRecordsByOwnSeqOnly) {
  std::vector<PostedRecv> t(kPostedSlots);
  EXPECT_FALSE(posted_read(t.data(), 1));
  posted_write(t.data(), 1, 7, 128, 64);
  auto v = posted_read(t.data(), 1);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->buf_id, 7u);
  EXPECT_EQ(v->offset, 128u);
  EXPECT_EQ(v->len, 64u);
  posted_write(t.data(), 1 + kPostedSlots, 8, 0, 8);  // same slot, later seq
  EXPECT_FALSE(posted_read(t.data(), 1));
  EXPECT_TRUE(posted_read(t.data(), 1 + kPostedSlots));
}

TEST(Wire, ParsersAcceptValidAndRejectMalformed) {
  RegRecord r;
  r.buf_id = 2;
  r.state = kRegPublished;
  r.version = 1;
  r.offset = 10;
  r.len = 20;
  r.handle.kind = gpu::HandleKind::HostShm;
  r.handle.alloc_bytes = 30;
  EXPECT_EQ(parse_publication(r, 2).len, 20u);
  r.len = 21;
  EXPECT_THROW(parse_publication(r, 2), Error);
  r.len = 20;
  std::memset(r.handle.data, 'x', sizeof r.handle.data);  // unterminated name
  EXPECT_THROW(parse_publication(r, 2), Error);

  DescRecord d{5, 1, kStatusOk, 0, 8};
  EXPECT_EQ(parse_desc(d, 5, 1).len, 8u);
  EXPECT_THROW(parse_desc(d, 6, 1), Error);
  d.status = 99;
  EXPECT_THROW(parse_desc(d, 5, 1), Error);

  shm::RingMsg m{kMsgAck, 1, 3, 0, 0, 0, kStatusOk, 0, 0};
  EXPECT_NO_THROW(check_reply(m, 3, 1));
  EXPECT_THROW(check_reply(m, 2, 1), Error);
  m.type = kMsgRts;
  EXPECT_THROW(check_reply(m, 3, 1), Error);
  EXPECT_NO_THROW(check_arrival(m, 1));
  m.offset = UINT64_MAX;
  m.len = 2;
  EXPECT_THROW(check_arrival(m, 1), Error);

  RelaySlotMeta rm{1, 0, 4096, 8192, 0, 1, 3, 0, kStatusOk, 0};
  EXPECT_TRUE(relay_meta_valid(rm, 4096));
  rm.bytes = 4097;
  EXPECT_FALSE(relay_meta_valid(rm, 4096));
  EXPECT_THROW(check_relay_geometry(65, 4096, 1 << 30, "x"), Error);
  EXPECT_NO_THROW(check_relay_geometry(2, 4096, RelayView::bytes(2, 4096), "x"));
  EXPECT_THROW(check_relay_geometry(2, 4096, RelayView::bytes(2, 4096) - 1, "x"), Error);

  JoinRecord j;
  j.magic = kJoinMagic;
  j.version = kJoinVersion;
  EXPECT_EQ(parse_join(&j, sizeof j, 0).device, -1);
  EXPECT_THROW(parse_join(&j, sizeof j - 1, 0), Error);
  j.completion_pref = 7;
  EXPECT_THROW(parse_join(&j, sizeof j, 0), Error);
}
