// In-place NCCL-form pairs of one launch (transport/stream_gate.h): which ops are paired, where their
// gates go, and the bound.
#include <gtest/gtest.h>

#include <memory>

#include "peerlink/errors.h"
#include "transport/stream_gate.h"
#include "transport/stream_p2p.h"

using namespace peerlink;
using namespace peerlink::stream;
using detail::StreamOpKind;

namespace {

constexpr uint64_t kChunk = 128 << 10, kLLMax = 512 << 10;

struct Launch {
  StreamLaunch L{};
  std::unique_ptr<PairSection> sec[2] = {std::make_unique<PairSection>(), std::make_unique<PairSection>()};
  // A channel to/from `peer` with ops of (src, dst, len).
  int channel(StreamOpKind kind, int peer, std::initializer_list<DevOp> ops) {
    DevChannel& c = L.ch[L.nch];
    c.kind = int16_t(kind);
    c.peer = int16_t(peer);
    c.first_op = int16_t(nops);
    c.mine = sec[peer].get();
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
