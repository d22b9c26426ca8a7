// Memory layout of the registered allreduce buffers, shared by host code and device kernels.
//
// Every rank owns two exported allocations that all peers map:
//  * flags: FlagArea. Peers *push* their readiness into our inbox (remote store), we spin on local
//    memory. A flag holds the sequence number of the step it announces; sequence numbers only grow,
//    so flags are never reset between calls (a waiter compares with >=).
//  * data: two slots (step parity), each [input region | result region], each region n * cap bytes.
//    input region position r  : what rank r pushed to us (one-shot: r's whole chunk; two-shot: r's
//                               copy of our shard);
//    result region position q : the reduced shard q pushed by its owner (two-shot all-gather).
//
// Why two slots suffice without an end-of-call barrier: a rank writes slot s at step k only after
// it saw, at step k-1, a flag that every peer (same block index, see below) set after finishing
// step k-2, the previous user of slot s. Work is split among "blocks" (CUDA blocks; one on the host)
// and a block b only ever exchanges data and flags with block b of the peers, over sub-ranges that
// are the same for every step of a call, so the argument holds per block index. Across calls the
// kernel boundary gives the same guarantee (a kernel starts after the previous one finished).
#pragma once
#include <cstddef>
#include <cstdint>

#include "collectives/host_device.h"

namespace peerlink::coll {

// Ranks a collective supports (one node's GPUs). A job may have up to bootstrap::kMaxRanks (64)
// ranks for point-to-point; its collectives then throw UnsupportedError.
constexpr int kMaxRanks = 8;
constexpr int kMaxBlocks = 160;  // >= SM count of the GPUs we launch one block per SM on
constexpr int kPhases = 2;       // 0: input pushed, 1: reduced shard pushed (two-shot)
constexpr size_t kHostLlMax = size_t(16) << 10;  // host backend: LL messages up to 16 KB (CI)
constexpr size_t kHostLl128Max = size_t(16) << 10;  // host backend: LL128 pieces up to 16 KB (CI)

// Threads per block of the GPU LL kernels (allreduce's and the other collectives'), for a message
// (allreduce) or largest piece of `bytes`. One 8-byte word per thread, so fewer threads spread it
// over more blocks and SMs. The fastest measured per size; allreduce, 2x H200, graph, bf16:
// 128 / 256 / 512 threads 1.97 / 1.98 / 2.05 us at 8 B, 2.23 / 2.23 / 2.42 at 8 KB, 2.40 / 2.45 /
// 2.56 at 32 KB, 3.05 / 3.04 / 3.13 at 128 KB, 7.57 / 6.61 / 5.44 at 512 KB. The one-GPU stand-in
// agrees (allreduce 128 best or tied to 64 KB, 256 at 128 KB, 512 from
// 256 KB; the other collectives 0.1-0.25 us faster with 128 than 512 from 8 B to 32 KB).
inline int ll_threads(size_t bytes) {
  if (bytes <= (size_t(64) << 10)) return 128;
  if (bytes <= (size_t(128) << 10)) return 256;
  return 512;
}

struct FlagArea {
  uint64_t inbox[kPhases][kMaxBlocks][kMaxRanks];  // [phase][block][source rank], written by peers
  uint64_t counter[kMaxBlocks];  // device: per-block step counter (advanced by the kernel itself)
  uint32_t abort;                // device: set by a block whose wait ran out; later blocks bail out
  uint32_t pad[15];
  // Zero-copy collectives (coll_zero_copy.cpp): [source rank] = that rank's tag of the call it
  // entered (window, offset, shape, step sequence number), written before its entry flag, so every
  // rank sees whether all ranks passed the same window offset before any byte moves.
  uint64_t zc_tag[kMaxRanks];
};

// Geometry of one rank's data allocation; identical on every rank.
// After the two slots comes the LL area (GPU only): per slot and source rank, `ll_cap` bytes of
// 16-byte lines {data 4 B, flag 4 B, data 4 B, flag 4 B}: each 8-byte half carries its own flag
// (the low 32 bits of the step's sequence number), so a reader needs no fence and no separate flag,
// only one NVLink write latency. It is kept apart from the raw slots so that stale raw data can never
// look like a valid line, and zeroed at setup.
// Then the LL128 area (GPU, NVLink only), 128-byte aligned: per slot and source rank, `ll128_cap`
// bytes of 128-byte lines, 120 data bytes and an 8-byte flag (the step's sequence number) in the
// last 8 bytes. A warp stores a line with one 16-byte store per lane and NVLink delivers the 128
// bytes whole (what NCCL's LL128 protocol relies on, and why it is off for PCIe pairs), so a reader
// that sees the flag has the line. Zeroed at setup, written only with LL128 lines.
constexpr size_t kLl128Line = 128;
constexpr size_t kLl128Data = 120;
PL_HD size_t ll128_lines(size_t bytes) { return (bytes + kLl128Data - 1) / kLl128Data; }

struct DataLayout {
  int world = 0;
  size_t cap = 0;     // bytes of one region position (one-shot chunk, two-shot shard)
  size_t ll_cap = 0;  // bytes of LL lines per (slot, source rank); 0 = no LL area
  size_t ll128_cap = 0;  // bytes of LL128 lines per (slot, source rank), a multiple of 128; 0 = none
  PL_HD size_t region() const { return size_t(world) * cap; }
  PL_HD size_t slot_bytes() const { return 2 * region(); }
  PL_HD size_t ll128_base() const {
    return (2 * slot_bytes() + 2 * size_t(world) * ll_cap + kLl128Line - 1) / kLl128Line * kLl128Line;
  }
  PL_HD size_t total() const {
    return ll128_cap ? ll128_base() + 2 * size_t(world) * ll128_cap : 2 * slot_bytes() + 2 * size_t(world) * ll_cap;
  }
  PL_HD size_t input(int slot, int pos) const { return size_t(slot) * slot_bytes() + size_t(pos) * cap; }
  PL_HD size_t result(int slot, int pos) const { return input(slot, pos) + region(); }
  PL_HD size_t ll(int slot, int pos) const { return 2 * slot_bytes() + (size_t(slot) * world + pos) * ll_cap; }
  PL_HD size_t ll128(int slot, int pos) const { return ll128_base() + (size_t(slot) * world + pos) * ll128_cap; }
};

// Error word layout (host-visible): 0 = fine; else code | (peer << 8) | (rank << 16).
constexpr uint32_t kErrTimeout = 1;
constexpr uint32_t kErrWindowMismatch = 2;  // a zero-copy call's tags differ: `peer` passed another window offset

// The tag a rank publishes when it enters zero-copy step `seq` (FlagArea::zc_tag): its call's tag
// mixed with the sequence number, so a tag left by an earlier call never matches.
PL_HD uint64_t zc_step_tag(uint64_t call_tag, uint64_t seq) { return call_tag ^ (seq * 0x9E3779B97F4A7C15ull); }

// Work split for one call: every step (chunk) has `step_elems` elements (the last may be shorter);
// shards and block sub-ranges are multiples of `vec` elements (16 bytes) so scratch accesses stay
// 16-byte aligned, and they are the same for every step of the call (see above).
struct Split {
  size_t count = 0;       // elements of the whole call
  size_t step_elems = 0;  // elements per step
  size_t steps = 0;
  size_t shard = 0;       // elements per shard (two-shot) or the whole step (one-shot)
  size_t per_block = 0;   // elements per block within a shard
};

inline size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

// one_shot: each step's data must fit `cap` bytes; two-shot: each shard must.
inline Split make_split(size_t count, size_t elem, int world, size_t cap, bool one_shot, int blocks) {
  Split s;
  s.count = count;
  size_t vec = 16 / elem;
  size_t cap_elems = cap / elem / vec * vec;
  s.step_elems = one_shot ? cap_elems : cap_elems * size_t(world);
  if (s.step_elems > count) s.step_elems = count;
  s.steps = count == 0 ? 0 : (count + s.step_elems - 1) / s.step_elems;
  s.shard = one_shot ? round_up(s.step_elems, vec) : round_up((s.step_elems + world - 1) / world, vec);
  if (s.shard > cap_elems) s.shard = cap_elems;
  s.per_block = round_up((s.shard + blocks - 1) / blocks, vec);
  return s;
}

}  // namespace peerlink::coll
