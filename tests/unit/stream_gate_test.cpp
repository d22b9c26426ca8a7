// In-place NCCL-form pairs of one launch (stream/stream_gate.h): which ops are paired, where their
// gates go, and the bound.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "peerlink/errors.h"
#include "stream/stream_gate.h"
#include "stream/stream_p2p.h"

using namespace peerlink;
using namespace peerlink::stream;
using detail::StreamOpKind;

namespace {

constexpr uint64_t kChunk = 128 << 10, kLLMax = 512 << 10;

struct Launch {
  StreamLaunch L{};
  std::unique_ptr<PairSection> sec[2] = {std::make_unique<PairSection>(), std::make_unique<PairSection>()};
  std::unique_ptr<PairSection> far[2] = {std::make_unique<PairSection>(), std::make_unique<PairSection>()};
  // A channel to/from `peer` with ops of (src, dst, len).
  int channel(StreamOpKind kind, int peer, std::initializer_list<DevOp> ops, int32_t direct = 0) {
    DevChannel& c = L.ch[L.nch];
    c.kind = int16_t(kind);
    c.peer = int16_t(peer);
    c.first_op = int16_t(nops);
    c.direct = direct;
    c.mine = sec[peer].get();
    c.remote = far[peer].get();
    for (const DevOp& o : ops) {
      L.ops[nops++] = o;
      ++c.nops;
    }
    return L.nch++;
  }
  int nops = 0;
};

char buf[4][64];
DevOp send_op(const char* src, uint64_t len) { return DevOp{src, nullptr, len, 0, 0, 0}; }
DevOp recv_op(char* dst, uint64_t len, uint32_t flags = 0) { return DevOp{nullptr, dst, len, 0, 7, flags}; }
// Addresses of device buffers (never dereferenced here).
char* addr(uintptr_t a) { return reinterpret_cast<char*>(a); }
constexpr uint64_t kMB = 1 << 20;

}  // namespace

TEST(StreamGate, PairsTheExactInPlaceSendAndRecv) {
  Launch t;
  t.channel(StreamOpKind::SendRaw, 1, {send_op(buf[1], 100), send_op(buf[0], 4 << 20)});
  t.channel(StreamOpKind::RecvRaw, 1, {recv_op(buf[0], 4 << 20, kOpDirectOk), recv_op(buf[2], 100)});
  EXPECT_EQ(gate_in_place(t.L, kChunk, kLLMax), 1);
  const DevOp& s = t.L.ops[1];
  const DevOp& r = t.L.ops[2];
  EXPECT_EQ(r.flags, kOpGated);  // no zero-copy for a gated recv
  EXPECT_EQ(r.buf_id, 0u);
  EXPECT_EQ(s.flags, kOpGated);
  EXPECT_EQ(reinterpret_cast<const void*>(s.dst), static_cast<const void*>(&t.sec[1]->gate[0]));
  EXPECT_EQ(t.L.ops[0].flags, 0u);  // another buffer: untouched
  EXPECT_EQ(t.L.ops[3].flags, 0u);
  EXPECT_EQ(t.L.ops[3].buf_id, 7u);
}

TEST(StreamGate, GatesFollowEachOtherPerRecvChannel) {
  Launch t;
  // Ring-like: send to peer 1, recv from peer 0, two in-place pairs of different lengths.
  t.channel(StreamOpKind::SendRaw, 1, {send_op(buf[0], 1 << 20), send_op(buf[1], 20 << 10)});
  t.channel(StreamOpKind::RecvRaw, 0, {recv_op(buf[0], 1 << 20), recv_op(buf[1], 20 << 10)});
  EXPECT_EQ(gate_in_place(t.L, kChunk, kLLMax), 2);
  // 1 MB: staged half slots (64 KB) = 16 chunks; then 20 KB: five 4 KB LL pieces.
  EXPECT_EQ(t.L.ops[2].buf_id, 0u);
  EXPECT_EQ(t.L.ops[3].buf_id, 16u);
  EXPECT_EQ(reinterpret_cast<const void*>(t.L.ops[1].dst), static_cast<const void*>(&t.sec[0]->gate[16]));
}

TEST(StreamGate, LeavesPartialOverlapsAndSecondSendsAlone) {
  Launch t;
  t.channel(StreamOpKind::SendRaw, 1, {send_op(buf[0], 64), send_op(buf[0], 64), send_op(buf[0] + 8, 32)});
  t.channel(StreamOpKind::RecvRaw, 1, {recv_op(buf[0], 64), recv_op(buf[0], 32), recv_op(buf[3], 0)});
  EXPECT_EQ(gate_in_place(t.L, kChunk, kLLMax), 1);  // one send per recv; lengths must match
  EXPECT_EQ(t.L.ops[0].flags, kOpGated);
  EXPECT_EQ(t.L.ops[1].flags, 0u);
  EXPECT_EQ(t.L.ops[2].flags, 0u);
  EXPECT_EQ(t.L.ops[4].flags, 0u);
}

TEST(StreamGate, TooManyChunksIsUnsupported) {
  Launch t;
  const uint64_t big = uint64_t(kGateCap) * kChunk + 1;  // kGateCap + 1 whole-slot chunks
  t.channel(StreamOpKind::SendRaw, 1, {send_op(buf[0], big)});
  t.channel(StreamOpKind::RecvRaw, 1, {recv_op(buf[0], big)});
  EXPECT_THROW(gate_in_place(t.L, kChunk, kLLMax), UnsupportedError);
}

TEST(StreamGate, ZeroCopyRecvsGateUnitsInTheWritersArea) {
  Launch t;
  t.L.direct_min = 1 * kMB;  // candidates from 1 MB on, between ranks of this process
  t.channel(StreamOpKind::SendRaw, 1, {send_op(addr(0x100000), 4 * kMB), send_op(addr(0x900000), 3 * kMB + 16)});
  const int rc = t.channel(StreamOpKind::RecvRaw, 1,
                           {recv_op(addr(0x500000), 2 * kMB, kOpDirectOk), recv_op(addr(0x100000), 4 * kMB, kOpDirectOk),
                            recv_op(addr(0x900000), 3 * kMB + 16, kOpDirectOk)},
                           kDirectLocal);
  EXPECT_EQ(gate_in_place(t.L, kChunk, kLLMax), 2);
  const DevOp &s0 = t.L.ops[0], &s1 = t.L.ops[1];
  EXPECT_EQ(t.L.ops[2].flags, kOpDirectOk);  // out of place: untouched
  const DevOp &r0 = t.L.ops[3], &r1 = t.L.ops[4];
  EXPECT_EQ(r0.flags, kOpDirectOk | kOpGateZc);  // stays zero-copy, posted gated
  EXPECT_EQ(r0.buf_id, 0u);
  EXPECT_EQ(s0.flags, kOpGateZc);
  EXPECT_EQ(reinterpret_cast<const void*>(s0.dst), static_cast<const void*>(&t.far[1]->swap_gate[0]));
  EXPECT_EQ(s0.buf_id, uint32_t(rc));
  EXPECT_EQ(s0.offset, 2u);  // the recv is its channel's second zero-copy candidate
  // 4 MB = 128 units of 32 KB; the next pair's gates follow (3 MB + 16 bytes: 97 units).
  EXPECT_EQ(r1.buf_id, 128u);
  EXPECT_EQ(reinterpret_cast<const void*>(s1.dst), static_cast<const void*>(&t.far[1]->swap_gate[128]));
  EXPECT_EQ(s1.offset, 3u);
}

TEST(StreamGate, StagesWhatTheExchangeCannotGate) {
  struct Case {
    const char* why;
    char* buf;
    uint64_t len;
    uint32_t recv_flags;
    uint64_t chunk;
  } cases[] = {
      {"unaligned buffer", addr(0x100008), 4 * kMB, kOpDirectOk, kChunk},
      {"length not a multiple of 16", addr(0x100000), 4 * kMB + 4, kOpDirectOk, kChunk},
      {"buffer the peer cannot write", addr(0x100000), 4 * kMB, 0, kChunk},
      {"another process (kernel decides)", addr(0x100000), 4 * kMB, kOpDirectIpc, kChunk},
      {"staging chunks smaller than two units", addr(0x100000), 4 * kMB, kOpDirectOk, 32 << 10},
      {"below the zero-copy threshold", addr(0x100000), kMB / 2, kOpDirectOk, kChunk},
  };
  for (const Case& c : cases) {
    Launch t;
    t.L.direct_min = 1 * kMB;
    t.channel(StreamOpKind::SendRaw, 1, {send_op(c.buf, c.len)});
    t.channel(StreamOpKind::RecvRaw, 1, {recv_op(c.buf, c.len, c.recv_flags)}, kDirectLocal);
    EXPECT_EQ(gate_in_place(t.L, c.chunk, kLLMax), 1) << c.why;
    EXPECT_EQ(t.L.ops[1].flags, kOpGated) << c.why;
    EXPECT_EQ(t.L.ops[0].flags, kOpGated) << c.why;
    EXPECT_EQ(reinterpret_cast<const void*>(t.L.ops[0].dst), static_cast<const void*>(&t.sec[1]->gate[0])) << c.why;
  }
}

TEST(StreamGate, UnitsBeyondTheCapAreStaged) {
  Launch t;
  t.L.direct_min = 1 * kMB;
  const uint64_t fits = (uint64_t(kSwapGateCap) - 2) * kSwapUnit;  // all units but two
  t.channel(StreamOpKind::SendRaw, 1, {send_op(addr(0x100000), fits), send_op(addr(0x40000000), 3 * kSwapUnit)});
  t.channel(StreamOpKind::RecvRaw, 1,
            {recv_op(addr(0x100000), fits, kOpDirectOk), recv_op(addr(0x40000000), 3 * kSwapUnit, kOpDirectOk)},
            kDirectLocal);
  EXPECT_EQ(gate_in_place(t.L, kChunk, kLLMax), 2);
  EXPECT_EQ(t.L.ops[2].flags, kOpDirectOk | kOpGateZc);
  EXPECT_EQ(t.L.ops[3].flags, kOpGated);  // three more units would not fit: staged, its gates from 0
  EXPECT_EQ(t.L.ops[3].buf_id, 0u);
  EXPECT_EQ(t.L.ops[1].flags, kOpGated);
}
