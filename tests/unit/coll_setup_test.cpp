// The allreduce setup record a peer publishes through the allgather is
// untrusted. parse_setup_record checks every field (pure function, also fuzzed:
// tests/fuzz/coll_setup_fuzz.cpp); the multi-process test has a hostile rank publish corrupt
// records and the victim's allreduce must end with a typed error, having mapped or written nothing.
#include <gtest/gtest.h>

#include <algorithm>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "collectives/layout.h"
#include "collectives/setup_record.h"
#include "peerlink/collectives.h"
#include "peerlink/peerlink.h"
#include "support/mp.h"
#include "transport/services.h"

using namespace peerlink;
using peerlink::coll::SetupExpect;
using peerlink::coll::SetupRecord;

namespace {

SetupExpect host_expect(int world = 2) {
  SetupExpect e;
  e.world = world;
  e.host = true;
  e.cap = 1 << 20;
  // The host backend has a small LL area too (coll_state.cpp: the other collectives' LL path).
  e.ll_cap = 2 * std::min(coll::round_up(Options{}.allreduce_ll_max, 16), coll::kHostLlMax);
  // And a small LL128 area (coll_state.cpp).
  e.ll128_cap = coll::ll128_lines(std::min(Options{}.allreduce_ll128_max, coll::kHostLl128Max)) * coll::kLl128Line;
  e.flag_bytes = sizeof(coll::FlagArea);
  coll::DataLayout L;
  L.world = world;
  L.cap = e.cap;
  L.ll_cap = e.ll_cap;
  L.ll128_cap = e.ll128_cap;
  e.data_bytes = L.total();
  return e;
}

SetupRecord valid_record(int rank, const SetupExpect& e) {
  SetupRecord r;
  r.rank = rank;
  r.world = e.world;
  r.host = e.host ? 1 : 0;
  r.cap = e.cap;
  r.ll_cap = e.ll_cap;
  r.ll128_cap = e.ll128_cap;
  r.ll128_links = 1;
  r.flags.kind = e.host ? gpu::HandleKind::HostShm : gpu::HandleKind::DeviceIpc;
  r.flags.alloc_bytes = e.flag_bytes;
  r.data.kind = r.flags.kind;
  r.data.alloc_bytes = e.data_bytes + 4096;
  r.data_off = 4096;
  r.sm_count = e.host ? 0 : 132;
  r.grid_max = coll::kMaxBlocks;
  r.process = 7;
  r.device = e.host ? -1 : 0;
  return r;
}

std::string parse_error(const SetupRecord& r, int from, const SetupExpect& e, size_t bytes = sizeof(SetupRecord)) {
  try {
    coll::parse_setup_record(&r, bytes, from, e);
  } catch (const InvalidArgument& ex) {
    return ex.what();
  }
  return "";
}

// Each corruption of a valid record, and a word its error must contain.
struct Corruption {
  const char* name;
  std::function<void(SetupRecord&)> apply;
  const char* needle;
};

std::vector<Corruption> corruptions() {
  return {
      {"magic", [](SetupRecord& r) { r.magic = 0; }, "magic"},
      {"version", [](SetupRecord& r) { r.version = 99; }, "version 99"},
      {"claims another rank", [](SetupRecord& r) { r.rank = 0; }, "claims rank 0"},
      {"world", [](SetupRecord& r) { r.world = 8; }, "8 ranks"},
      {"cap", [](SetupRecord& r) { r.cap = 64; }, "scratch 64"},
      {"ll_cap", [](SetupRecord& r) { r.ll_cap = 1 << 20; }, "LL"},
      {"ll128_cap", [](SetupRecord& r) { r.ll128_cap = 128; }, "LL128 128"},
      {"ll128_links", [](SetupRecord& r) { r.ll128_links = 2; }, "ll128_links 2"},
      {"host flag", [](SetupRecord& r) { r.host = 7; }, "/?"},
      {"flags kind", [](SetupRecord& r) { r.flags.kind = gpu::HandleKind::DeviceIpc; }, "flags handle has kind 2"},
      {"data kind", [](SetupRecord& r) { r.data.kind = gpu::HandleKind::None; }, "data handle has kind 0"},
      {"flags empty", [](SetupRecord& r) { r.flags.alloc_bytes = 0; }, "claims 0 bytes"},
      {"data past end", [](SetupRecord& r) { r.data_off = r.data.alloc_bytes - 128; }, "does not fit"},
      {"data offset wraps", [](SetupRecord& r) { r.data_off = UINT64_MAX - 127; }, "does not fit"},
      {"flags offset past alloc", [](SetupRecord& r) { r.flags_off = r.flags.alloc_bytes + 8; }, "does not fit"},
      {"flags misaligned", [](SetupRecord& r) { r.flags_off = 4; }, "multiple of 8"},
      {"data misaligned", [](SetupRecord& r) { r.data_off = 4104; }, "multiple of 128"},
      {"grid_max 0", [](SetupRecord& r) { r.grid_max = 0; }, "grid_max 0"},
      {"grid_max above the flag area", [](SetupRecord& r) { r.grid_max = coll::kMaxBlocks + 1; }, "grid_max 161"},
      {"multiprocessors on the host", [](SetupRecord& r) { r.sm_count = 132; }, "132 multiprocessors"},
      {"negative multiprocessors", [](SetupRecord& r) { r.sm_count = -5; }, "-5 multiprocessors"},
      {"device", [](SetupRecord& r) { r.device = -2; }, "device -2"},
  };
}

}  // namespace

TEST(CollSetup, ValidRecordPasses) {
  SetupExpect e = host_expect();
  SetupRecord r = valid_record(1, e);
  EXPECT_EQ(parse_error(r, 1, e), "");
  SetupRecord got = coll::parse_setup_record(&r, sizeof r, 1, e);
  EXPECT_EQ(got.data_off, 4096u);
}

TEST(CollSetup, EveryCorruptFieldIsInvalidArgumentNamingIt) {
  SetupExpect e = host_expect();
  for (const Corruption& c : corruptions()) {
    SetupRecord r = valid_record(1, e);
    c.apply(r);
    std::string what = parse_error(r, 1, e);
    EXPECT_NE(what.find(c.needle), std::string::npos) << c.name << ": '" << what << "'";
    EXPECT_NE(what.find("rank 1"), std::string::npos) << c.name << ": '" << what << "'";
  }
  SetupRecord r = valid_record(1, e);
  EXPECT_NE(parse_error(r, 1, e, sizeof r - 1).find("bytes"), std::string::npos);
}

// The grid every rank computes from the records: the smallest multiprocessor count, and the cap: the
// smallest grid_max, and each GPU's multiprocessors shared among the ranks of one process on it
// (`shared`: such ranks launch without PDL).
TEST(CollSetup, GridAgreement) {
  auto rec = [](int sm, int grid_max, uint64_t process, int device) {
    SetupRecord r;
    r.sm_count = sm;
    r.grid_max = grid_max;
    r.process = process;
    r.device = device;
    return r;
  };
  const int full = coll::kMaxBlocks;
  {  // one process per GPU: the whole GPU, LL128's grids may pass one block per multiprocessor
    SetupRecord all[] = {rec(132, full, 1, 0), rec(132, full, 2, 1)};
    coll::GridAgreement g = coll::grid_agreement(all, 2);
    EXPECT_EQ(g.sm_count, 132);
    EXPECT_EQ(g.cap, full);
    EXPECT_FALSE(g.shared);
  }
  {  // GPUs of different sizes: the smaller; one rank's max_blocks binds every rank
    SetupRecord all[] = {rec(132, full, 1, 0), rec(114, 24, 2, 0), rec(132, full, 3, 1)};
    coll::GridAgreement g = coll::grid_agreement(all, 3);
    EXPECT_EQ(g.sm_count, 114);
    EXPECT_EQ(g.cap, 24);
    EXPECT_FALSE(g.shared);  // two processes on GPU 0: time-sliced, not sharing blocks
  }
  {  // two threads of one process on GPU 0 (and one more process on GPU 0: time-sliced, not counted)
    SetupRecord all[] = {rec(132, full, 5, 0), rec(132, full, 5, 0), rec(132, full, 6, 0), rec(132, full, 5, 1)};
    coll::GridAgreement g = coll::grid_agreement(all, 4);
    EXPECT_EQ(g.cap, 66);
    EXPECT_TRUE(g.shared);  // and so no programmatic dependent launch (coll_state.cpp)
  }
  {  // four threads on one GPU, and the host backend (no multiprocessors, no device)
    SetupRecord gpu[] = {rec(132, full, 5, 3), rec(132, full, 5, 3), rec(132, full, 5, 3), rec(132, full, 5, 3)};
    EXPECT_EQ(coll::grid_agreement(gpu, 4).cap, 33);
    SetupRecord host[] = {rec(0, full, 5, -1), rec(0, full, 5, -1)};
    coll::GridAgreement g = coll::grid_agreement(host, 2);
    EXPECT_EQ(g.sm_count, 0);
    EXPECT_EQ(g.cap, full);
    EXPECT_FALSE(g.shared);
  }
}

// A hostile rank publishes a corrupt record in place of its allreduce setup; the victim's first
// allreduce must throw a typed error (InvalidArgument, or Error when the backend finds the mapped
// segment smaller than the handle claims) within the timeout and never crash.
TEST(MpCollSetup, CorruptPeerRecordIsATypedErrorOnTheVictim) {
  std::vector<Corruption> cases = corruptions();
  cases.push_back({"handle claims more than the segment", [](SetupRecord& r) { r.data.alloc_bytes += 1 << 20; },
                   "handle"});  // coll_state (device) or the host backend's open
  for (const Corruption& c : cases) {
    std::string uid = pltest::unique_test_id("coll-hostile");
    std::string fail = pltest::run_ranks(2, [&](int rank) {
      Options o;
      o.timeout = std::chrono::milliseconds(10000);
      Communicator comm(uid, rank, 2, kHostDevice, o);
      if (rank == 0) {  // the victim
        std::vector<float> x(256, 1.0f), before = x;
        std::string what;
        try {
          allreduce(comm, x.data(), x.data(), x.size(), DataType::F32, ReduceOp::Sum);
        } catch (const Error& e) {
          what = e.what();
        }
        MP_CHECK_MSG(what.find(c.needle) != std::string::npos, c.name << ": '" << what << "'");
        MP_CHECK_MSG(x == before, c.name << ": the victim's buffer changed");
        return;
      }
      // The hostile rank: real, exported allocations of the right sizes, then one corruption.
      SetupExpect e = host_expect();
      detail::CommServices& svc = detail::services(comm);
      void* flags = comm.alloc(e.flag_bytes);
      void* data = comm.alloc(e.data_bytes);
      SetupRecord r = valid_record(1, e);
      size_t off = 0;
      r.flags = svc.export_memory(flags, e.flag_bytes, &off);
      r.flags_off = off;
      r.data = svc.export_memory(data, e.data_bytes, &off);
      r.data_off = off;
      c.apply(r);
      std::vector<SetupRecord> all(2);
      comm.allgather_bytes(&r, sizeof r, all.data());  // the victim's setup allgather
      // Keep the allocations alive until the victim has looked at them and left (it never
      // publishes this buffer: the wait ends with PeerLostError when the victim closes).
      try {
        comm.wait_ipc_buffer(0, 999, 1);
      } catch (const Error&) {
      }
    }, std::chrono::milliseconds(30000));
    EXPECT_EQ(fail, "") << c.name;
    EXPECT_TRUE(pltest::leftover_segments(uid).empty()) << c.name;
  }
}
