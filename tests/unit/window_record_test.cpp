// The window registration record (src/collectives/window_record.h) read back from the bootstrap
// allgather is untrusted: parse_window_record must accept the records a real register_window sends
// (host and GPU, exported or not) and reject every corrupt field with an InvalidArgument that names
// the sending rank and the field, before any offset is added to a mapped base. Also fuzzed:
// tests/fuzz/window_record_fuzz.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "collectives/window_record.h"
#include "peerlink/errors.h"
#include "peerlink/options.h"

using namespace peerlink;
using peerlink::coll::WindowExpect;
using peerlink::coll::WindowRecord;
using peerlink::gpu::HandleKind;

namespace {

constexpr uint64_t kAlloc = 1 << 20;

WindowExpect expect(bool host, uint64_t id = 3) {
  WindowExpect e;
  e.id = id;
  e.host = host;
  return e;
}

// What rank `rank` sends for window `id`: [offset, offset+bytes) of an exported allocation.
WindowRecord valid_record(int rank, bool host, uint64_t id = 3, HandleKind kind = HandleKind::None) {
  WindowRecord r;
  r.rank = rank;
  r.exported = 1;
  r.id = id;
  r.bytes = 4096;
  r.offset = 8192;
  r.handle.kind = kind != HandleKind::None ? kind : (host ? HandleKind::HostShm : HandleKind::DeviceIpc);
  r.handle.owner_pid = 4242;
  r.handle.alloc_id = 7;
  r.handle.alloc_bytes = kAlloc;
  r.handle.owner_base = 0x7f0000000000ull;
  std::memcpy(r.handle.data, "pl_seed_m1", 11);
  return r;
}

// What a rank sends for memory it could not export.
WindowRecord unexported_record(int rank, uint64_t id = 3) {
  WindowRecord r;
  r.rank = rank;
  r.exported = 0;
  r.id = id;
  r.bytes = 100;
  return r;
}

std::string parse_error(const void* raw, size_t bytes, int from, const WindowExpect& e) {
  try {
    coll::parse_window_record(raw, bytes, from, e);
  } catch (const InvalidArgument& ex) {
    return std::string(ex.what()).empty() ? "(empty message)" : ex.what();
  }
  return "";
}
std::string parse_error(const WindowRecord& r, int from, const WindowExpect& e) {
  return parse_error(&r, sizeof r, from, e);
}

struct Corruption {
  const char* name;
  std::function<void(WindowRecord&)> apply;
  const char* needle;  // a word the error must contain
};

// Corruptions of a valid (exported) record, on either backend.
std::vector<Corruption> corruptions() {
  return {
      {"magic", [](WindowRecord& r) { r.magic = 0x12345678; }, "magic"},
      {"magic byte-swapped", [](WindowRecord& r) { r.magic = 0x52574c50; }, "magic"},
      {"version 0", [](WindowRecord& r) { r.version = 0; }, "version 0"},
      {"version 2", [](WindowRecord& r) { r.version = 2; }, "version 2"},
      {"claims rank 0", [](WindowRecord& r) { r.rank = 0; }, "rank 0"},
      {"claims rank -1", [](WindowRecord& r) { r.rank = -1; }, "rank -1"},
      {"claims a huge rank", [](WindowRecord& r) { r.rank = INT32_MAX; }, "2147483647"},
      {"older window id", [](WindowRecord& r) { r.id = 2; }, "window 2"},
      {"newer window id", [](WindowRecord& r) { r.id = 4; }, "window 4"},
      {"id 0", [](WindowRecord& r) { r.id = 0; }, "window 0"},
      {"exported 2", [](WindowRecord& r) { r.exported = 2; }, "exported"},
      {"exported -1", [](WindowRecord& r) { r.exported = -1; }, "exported"},
      {"0 bytes", [](WindowRecord& r) { r.bytes = 0; }, "0 bytes"},
      {"handle kind None", [](WindowRecord& r) { r.handle.kind = HandleKind::None; }, "kind 0"},
      {"handle kind out of range", [](WindowRecord& r) { r.handle.kind = static_cast<HandleKind>(99); }, "kind 99"},
      {"allocation of 0 bytes", [](WindowRecord& r) { r.handle.alloc_bytes = 0; }, "0 bytes"},
      {"range past the allocation", [](WindowRecord& r) { r.offset = kAlloc - 4095; }, "does not fit"},
      {"offset past the allocation", [](WindowRecord& r) { r.offset = kAlloc + 1; }, "does not fit"},
      {"bytes larger than the allocation", [](WindowRecord& r) { r.offset = 0, r.bytes = kAlloc + 1; }, "does not fit"},
      {"offset + bytes wraps", [](WindowRecord& r) { r.offset = UINT64_MAX - 15; }, "does not fit"},
      {"bytes wraps with the offset", [](WindowRecord& r) { r.bytes = UINT64_MAX - 4096; }, "does not fit"},
      {"both at the top", [](WindowRecord& r) { r.offset = r.bytes = UINT64_MAX; }, "does not fit"},
  };
}

}  // namespace

TEST(WindowRecord, LayoutIsFixed) {
  // The seeds (tests/fuzz/corpus/make_coll_setup.py) and every rank of a job rely on this layout.
  EXPECT_EQ(sizeof(WindowRecord), 144u);
  EXPECT_EQ(WindowRecord::kMagic, 0x504c5752u);
  WindowRecord r;
  EXPECT_EQ(r.magic, WindowRecord::kMagic);
  EXPECT_EQ(r.version, WindowRecord::kVersion);
  EXPECT_EQ(r.exported, 0);
  EXPECT_EQ(r.handle.kind, HandleKind::None);
}

TEST(WindowRecord, ValidHostRecordsPass) {
  for (HandleKind k : {HandleKind::HostShm, HandleKind::HostFd}) {
    WindowRecord r = valid_record(1, true, 3, k);
    EXPECT_EQ(parse_error(r, 1, expect(true)), "") << int(k);
    WindowRecord got = coll::parse_window_record(&r, sizeof r, 1, expect(true));
    EXPECT_EQ(std::memcmp(&got, &r, sizeof r), 0) << "the parsed record differs from the bytes sent";
  }
}

TEST(WindowRecord, ValidGpuRecordsPass) {
  for (HandleKind k : {HandleKind::DeviceIpc, HandleKind::DeviceVmm}) {
    WindowRecord r = valid_record(5, false, 1, k);
    EXPECT_EQ(parse_error(r, 5, expect(false, 1)), "") << int(k);
    WindowRecord got = coll::parse_window_record(&r, sizeof r, 5, expect(false, 1));
    EXPECT_EQ(got.offset, 8192u);
    EXPECT_EQ(got.bytes, 4096u);
    EXPECT_EQ(got.handle.kind, k);
  }
}

// The edges that are still inside: the whole allocation, the last byte, a window of one byte.
TEST(WindowRecord, EdgesInsideTheAllocationPass) {
  for (bool host : {true, false}) {
    WindowRecord whole = valid_record(1, host);
    whole.offset = 0;
    whole.bytes = kAlloc;
    EXPECT_EQ(parse_error(whole, 1, expect(host)), "");
    WindowRecord last = valid_record(1, host);
    last.offset = kAlloc - 1;
    last.bytes = 1;
    EXPECT_EQ(parse_error(last, 1, expect(host)), "");
    WindowRecord tail = valid_record(1, host);
    tail.offset = kAlloc - 4096;
    EXPECT_EQ(parse_error(tail, 1, expect(host)), "");
    WindowRecord huge = valid_record(1, host);  // a 2^63-byte allocation: no overflow in the check
    huge.handle.alloc_bytes = uint64_t(1) << 63;
    huge.offset = (uint64_t(1) << 62);
    huge.bytes = (uint64_t(1) << 62);
    EXPECT_EQ(parse_error(huge, 1, expect(host)), "");
  }
}

// Not exported: no handle, and any offset (nothing is mapped); the window still registers.
TEST(WindowRecord, UnexportedRecordPasses) {
  for (bool host : {true, false}) {
    WindowRecord r = unexported_record(0);
    EXPECT_EQ(parse_error(r, 0, expect(host)), "");
    r.offset = UINT64_MAX;  // meaningless without a handle: never added to a base
    r.bytes = UINT64_MAX;
    WindowRecord got = coll::parse_window_record(&r, sizeof r, 0, expect(host));
    EXPECT_EQ(got.exported, 0);
    EXPECT_EQ(got.handle.kind, HandleKind::None);
  }
}

TEST(WindowRecord, EveryCorruptFieldIsInvalidArgumentNamingIt) {
  for (bool host : {true, false}) {
    for (const Corruption& c : corruptions()) {
      WindowRecord r = valid_record(1, host);
      c.apply(r);
      std::string what = parse_error(r, 1, expect(host));
      EXPECT_NE(what.find(c.needle), std::string::npos)
          << (host ? "host" : "gpu") << " " << c.name << ": '" << what << "'";
      EXPECT_NE(what.find("rank 1"), std::string::npos)
          << (host ? "host" : "gpu") << " " << c.name << ": '" << what << "'";
    }
  }
}

TEST(WindowRecord, WrongSizeIsRejected) {
  WindowRecord r = valid_record(1, true);
  std::vector<unsigned char> big(sizeof r + 8, 0);
  std::memcpy(big.data(), &r, sizeof r);
  for (size_t n : {size_t(0), size_t(1), sizeof r - 8, sizeof r - 1, sizeof r + 1, sizeof r + 8}) {
    std::string what = parse_error(big.data(), n, 1, expect(true));
    EXPECT_NE(what.find("bytes"), std::string::npos) << n << ": '" << what << "'";
    EXPECT_NE(what.find(std::to_string(n)), std::string::npos) << n << ": '" << what << "'";
  }
  EXPECT_EQ(parse_error(big.data(), sizeof r, 1, expect(true)), "");
}

// Host handles on a GPU communicator and device handles on a host one are refused.
TEST(WindowRecord, HandleKindMustMatchTheBackend) {
  for (HandleKind k : {HandleKind::DeviceIpc, HandleKind::DeviceVmm, HandleKind::None}) {
    WindowRecord r = valid_record(1, true, 3, HandleKind::HostShm);
    r.handle.kind = k;
    std::string what = parse_error(r, 1, expect(true));
    EXPECT_NE(what.find("kind " + std::to_string(uint32_t(k))), std::string::npos) << "host, kind " << int(k) << ": '"
                                                                                   << what << "'";
  }
  for (HandleKind k : {HandleKind::HostShm, HandleKind::HostFd, HandleKind::None}) {
    WindowRecord r = valid_record(1, false, 3, HandleKind::DeviceIpc);
    r.handle.kind = k;
    std::string what = parse_error(r, 1, expect(false));
    EXPECT_NE(what.find("kind " + std::to_string(uint32_t(k))), std::string::npos) << "gpu, kind " << int(k) << ": '"
                                                                                   << what << "'";
  }
}

// A rank that says it did not export but sends a handle anyway: nothing may map it.
TEST(WindowRecord, UnexportedWithAHandleIsRejected) {
  for (bool host : {true, false})
    for (HandleKind k : {HandleKind::HostShm, HandleKind::DeviceIpc, HandleKind::HostFd, HandleKind::DeviceVmm,
                         static_cast<HandleKind>(7)}) {
      WindowRecord r = unexported_record(2);
      r.handle.kind = k;
      r.handle.alloc_bytes = kAlloc;
      std::string what = parse_error(r, 2, expect(host));
      EXPECT_NE(what.find("rank 2"), std::string::npos) << int(k) << ": '" << what << "'";
      EXPECT_NE(what.find("kind " + std::to_string(uint32_t(k))), std::string::npos) << int(k) << ": '" << what << "'";
    }
  // The checks that do not depend on the handle apply to unexported records too.
  WindowRecord zero = unexported_record(2);
  zero.bytes = 0;
  EXPECT_NE(parse_error(zero, 2, expect(true)).find("0 bytes"), std::string::npos);
  WindowRecord other = unexported_record(2, 9);
  EXPECT_NE(parse_error(other, 2, expect(true)).find("window 9"), std::string::npos);
  WindowRecord liar = unexported_record(1);
  EXPECT_NE(parse_error(liar, 2, expect(true)).find("rank 1"), std::string::npos);
}

// The record is copied once: the input may be unaligned, and is only read.
TEST(WindowRecord, UnalignedInputIsReadAsIs) {
  WindowRecord r = valid_record(1, true);
  std::vector<unsigned char> buf(sizeof r + 3, 0xAB);
  std::memcpy(buf.data() + 3, &r, sizeof r);
  const std::vector<unsigned char> before = buf;
  WindowRecord got = coll::parse_window_record(buf.data() + 3, sizeof r, 1, expect(true));
  EXPECT_EQ(got.offset, r.offset);
  EXPECT_EQ(got.handle.alloc_bytes, kAlloc);
  EXPECT_EQ(buf, before);
}

TEST(WindowOptions, ParseAndEnv) {
  for (const char* s : {"zero_copy", "zc", "zerocopy", "ZERO_COPY", "ZC"})
    EXPECT_EQ(peerlink::parse_coll_algo(s), peerlink::CollAlgo::ZeroCopy) << s;
  EXPECT_STREQ(peerlink::to_string(peerlink::CollAlgo::ZeroCopy), "zero_copy");
  EXPECT_THROW(peerlink::parse_coll_algo("zero"), InvalidArgument);
  for (const char* s : {"two_hop", "twohop", "two-hop", "TWO_HOP"})
    EXPECT_EQ(peerlink::parse_coll_algo(s), peerlink::CollAlgo::TwoHop) << s;
  EXPECT_STREQ(peerlink::to_string(peerlink::CollAlgo::TwoHop), "two_hop");
  {
    peerlink::Options o;
    o.broadcast_algo = o.reduce_algo = peerlink::CollAlgo::TwoHop;
    EXPECT_NO_THROW(o.validate());
    o.all_gather_algo = peerlink::CollAlgo::TwoHop;  // broadcast and reduce only
    try {
      o.validate();
      ADD_FAILURE() << "validate() accepted all_gather_algo two_hop";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("all_gather_algo two_hop"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("PEERLINK_ALL_GATHER_ALGO"), std::string::npos) << e.what();
    }
    setenv("PEERLINK_ALL_GATHER_ALGO", "two-hop", 1);
    try {
      peerlink::Options::from_env();
      ADD_FAILURE() << "from_env() accepted PEERLINK_ALL_GATHER_ALGO=two-hop";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("PEERLINK_ALL_GATHER_ALGO='two-hop'"), std::string::npos) << e.what();
    }
    unsetenv("PEERLINK_ALL_GATHER_ALGO");
  }
  EXPECT_EQ(peerlink::Options{}.coll_zero_copy_min, size_t(8) << 20);
  setenv("PEERLINK_COLL_ZERO_COPY_MIN", "1024", 1);
  setenv("PEERLINK_ALL_GATHER_ALGO", "zc", 1);
  peerlink::Options o = peerlink::Options::from_env();
  EXPECT_EQ(o.coll_zero_copy_min, size_t(1024));
  EXPECT_EQ(o.all_gather_algo, peerlink::CollAlgo::ZeroCopy);
  setenv("PEERLINK_COLL_ZERO_COPY_MIN", "0", 1);
  EXPECT_EQ(peerlink::Options::from_env().coll_zero_copy_min, size_t(0));
  setenv("PEERLINK_COLL_ZERO_COPY_MIN", "-1", 1);
  EXPECT_THROW(peerlink::Options::from_env(), InvalidArgument);
  unsetenv("PEERLINK_COLL_ZERO_COPY_MIN");
  unsetenv("PEERLINK_ALL_GATHER_ALGO");
}

namespace {
// Each value of `var` makes Options::from_env() throw InvalidArgument naming the variable; unset after.
void expect_env_rejected(const char* var, std::initializer_list<const char*> values) {
  for (const char* v : values) {
    setenv(var, v, 1);
    try {
      peerlink::Options::from_env();
      ADD_FAILURE() << var << "=" << v << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(var), std::string::npos) << e.what();
    }
  }
  unsetenv(var);
}
}  // namespace

TEST(WindowOptions, CopyEngineMin) {
  EXPECT_EQ(peerlink::Options{}.coll_zero_copy_ce_min, size_t(128) << 20);
  setenv("PEERLINK_COLL_ZERO_COPY_CE_MIN", "0", 1);
  EXPECT_EQ(peerlink::Options::from_env().coll_zero_copy_ce_min, size_t(0));
  setenv("PEERLINK_COLL_ZERO_COPY_CE_MIN", "65536", 1);
  EXPECT_EQ(peerlink::Options::from_env().coll_zero_copy_ce_min, size_t(65536));
  expect_env_rejected("PEERLINK_COLL_ZERO_COPY_CE_MIN", {"-1", "2000000000000", "big"});
  peerlink::Options o;
  o.coll_zero_copy_ce_min = (size_t(1) << 40) + 1;
  EXPECT_THROW(o.validate(), InvalidArgument);
}

TEST(WindowOptions, GraphRegister) {
  EXPECT_EQ(peerlink::Options{}.coll_graph_register, 1);
  for (const char* v : {"0", "1", "2"}) {
    setenv("PEERLINK_COLL_GRAPH_REGISTER", v, 1);
    EXPECT_EQ(peerlink::Options::from_env().coll_graph_register, v[0] - '0') << v;
  }
  expect_env_rejected("PEERLINK_COLL_GRAPH_REGISTER", {"3", "-1", "on"});
  peerlink::Options o;
  o.coll_graph_register = 5;
  EXPECT_THROW(o.validate(), InvalidArgument);
}
