// What the host side of the stream engine (stream_gpu_launch.cpp) hands to the kernels
// (stream_kernels.cu): one launch per (batch, stream); every channel — a (peer, kind) pair of this
// rank — gets its own range of blocks [first_block, first_block + nblocks). A published-form send
// splits each message across its blocks (the last block to finish publishes the ready flag); an
// NCCL-form send or recv hands whole staging chunks to its blocks round robin (per-slot flags, no
// block waits for another). A channel's device-resident counters are read by all of its blocks when
// they start and written once, by the last block to leave (PairSection::exit), so a graph replay
// continues from whatever the counters say. The channels of one launch progress concurrently, which
// is what makes a group deadlock-free (a send waiting for its posted recv never blocks a recv of the
// same launch): the host keeps the whole grid within one block per multiprocessor
// (__launch_bounds__(kThreads, 1) guarantees one fits), and puts recv channels first in the grid.
// Passed by value as the kernel parameter (< 4 KB), so nothing is copied to the device at enqueue
// and a captured launch carries everything it needs except the counters.
#pragma once
#include <cstddef>
#include <cstdint>

#include "stream/stream_layout.h"

namespace peerlink::stream {

constexpr int kMaxLaunchOps = 48;
constexpr int kMaxLaunchChannels = 56;  // all pairs of 8 ranks, both forms, both directions

// Error word (host-mapped, written by the kernels, read by the next host call): code | peer << 8.
constexpr uint32_t kErrTimeout = 1;    // a wait ran past Options::timeout (peer dead or stalled)
constexpr uint32_t kErrMismatch = 2;   // matched calls disagreed on (buffer, offset, len): nothing written
constexpr uint32_t kErrProtocol = 3;   // a peer's descriptor or chunk header made no sense
constexpr uint32_t kErrAborted = 4;    // the peer stopped the pair (it saw a failure): its error tells why
constexpr uint32_t kErrRawLength = 5;  // NCCL form: the send's length differed from the recv's (pair stopped)

constexpr int kStreamThreads = 512;    // most threads per block (the kernel's launch bound)
// Threads per block for a launch whose largest message has `len` bytes: one 8-byte LL line per
// thread up to 1 KB. One-GPU stand-in, graph, ping-pong one-way: 128 threads
// instead of 512 took 0.25-0.35 us off at 8 B-1 KB (published 2.92-2.97 -> 2.62-2.65 us, NCCL form
// 3.24-3.27 -> 2.90-2.92), 256 threads 0.2 us at 2 KB (2.98-3.03 -> 2.76-2.79); at 4 KB 512 threads
// were as fast as 256 and 0.45 us faster than 128, from 8 KB up faster than both.
constexpr int stream_threads_for(uint64_t len) { return len <= 1024 ? 128 : len <= 2048 ? 256 : kStreamThreads; }
// Most blocks one channel gets (Options::stream_blocks overrides; the grid is also capped at the
// multiprocessor count). 64 blocks of 512 threads with 4 x 16-byte loads in flight per thread keep
// ~2 MB of stores outstanding, far more than the NVLink bandwidth-delay product (~450 GB/s x ~2 us
// = ~1 MB), and two such channels (a send and a recv of one group) still fit on 132 SMs.
constexpr int kMaxChannelBlocks = 64;
// Published-form sends get one block per this many bytes of their largest message (up to the cap):
// 128 KB -> 8 blocks of 16 KB each (a single block moves ~35-40 GB/s over NVLink, so one block
// alone would need ~3.5 us for 128 KB; 8 in parallel ~0.5 us plus one flag).
constexpr uint64_t kPubBytesPerBlock = 16 << 10;
// The same for an LL message, on both sides (each line carries its own flag, so the two sides may
// split the lines differently): one block up to 8 KB, above it one per 4 KB (one line per thread of
// 512). 2x H100, between processes, graph, one way us with 8 / 4 / 2 KB per block (two runs): 8 KB
// 3.99 / 4.10 / 4.04, 16 KB 4.45 / 4.10 / 4.10, 32 KB 4.65 / 4.17 / 4.13,
// 128 KB 5.69 / 4.47 / 4.42, 256 KB 6.28 / 5.22 / 5.25, 512 KB 7.72 / 7.73 / 7.70.
constexpr uint64_t kPubLLBytesPerBlock = 4 << 10;
constexpr uint64_t kPubLLOneBlockMax = 8 << 10;
inline uint64_t pub_ll_blocks(uint64_t len) {
  return len <= kPubLLOneBlockMax ? 1 : (len + kPubLLBytesPerBlock - 1) / kPubLLBytesPerBlock;
}

// Channel kinds beyond StreamOpKind (0-3): the two small kernels around a copy-engine published-form
// send (Options::stream_ce_min): wait for the posted recv and check it (writes ce_status), then,
// after the copy, publish ready and advance the channel's counter.
constexpr int kChCeWait = 4;
constexpr int kChCeDone = 5;
// A send to this rank matched with its recv (StreamOpKind::LocalCopy): the channel's blocks copy its
// ops; no peer, no flags, no counters (DevChannel::mine / remote are null).
constexpr int kChLocalCopy = 6;
// Local copies get one block per this many bytes (up to the channel cap). 1 MB per block left a
// 512 KB copy to one block: gather of 1 MB (512 KB per rank) through the NCCL shim went from 8.80
// to 12.37 us (2x H200).
constexpr uint64_t kLocalBytesPerBlock = 64 << 10;
// Blocks of an NCCL-form send channel that carries a zero-copy candidate (no staging slots, so no
// matching recv blocks: the recv side of such a message is one block). sendrecv_perf -g 2 through
// the shim, 256 MB, 2x H200: 32 / 64 / 96 / 128 blocks 762.6 / 754.0 / 748.5 /
// 748.3 us (NCCL 752.6).
constexpr int kDirectChannelBlocks = 96;

struct DevOp {
  const char* src;
  char* dst;       // SendPub: mapped destination; RecvRaw: user buffer
  uint64_t len;
  uint64_t offset;
  uint32_t buf_id;
  uint32_t flags;  // RecvRaw: kOpDirectOk / kOpDirectIpc / kOpGated / kOpGateZc; SendRaw: kOpGated / kOpGateZc
};
// RecvRaw of a zero-copy candidate (is_direct) whose buffer the peer's GPU can write: the kernel
// posts its address (else 0, and the message is staged).
constexpr uint32_t kOpDirectOk = 1;
// RecvRaw of a zero-copy candidate from a peer in another process, into an allocation exported to
// it under zero-copy slot buf_id (stream_zc.h), at `offset` into that allocation: the kernel posts
// ipc_post(buf_id, offset) once the peer acknowledged the slot (PairSection::zc_ack), else 0.
constexpr uint32_t kOpDirectIpc = 2;
// An NCCL-form pair of one launch in place (stream_gate.cpp): the RecvRaw writes exactly the bytes
// the SendRaw reads. The recv is staged (never zero-copy) and its gates are mine->gate[buf_id + j];
// the send's `dst` points at those gates (uint32_t), one per chunk, each opened once the chunk was
// read (stream_raw_device.h).
constexpr uint32_t kOpGated = 4;
// The same pair zero-copy (stream_swap_device.h; a recv the peer's GPU can write, kOpDirectOk, of
// 16-byte aligned bytes): the RecvRaw keeps kOpDirectOk and posts gated, its gates are
// remote->swap_gate[buf_id + u]; the SendRaw's `dst` points at those gates (in the writer's area),
// `buf_id` is the recv's channel and `offset` the recv's 1-based number among that channel's
// zero-copy candidates in the launch (its gates' tag: swap_tag(direct_recvd + offset)).
constexpr uint32_t kOpGateZc = 8;

// Between processes (stream_zc.h): where the receive allocation a peer exported under a zero-copy
// slot lies in this process, in this rank's private table [peer][kZcSlots] (device memory only
// this rank writes: a peer names a slot and an offset, never an address).
struct ZcEntry {
  uint64_t base;
  uint64_t size;  // 0: slot not bound
};
// A table entry a launch writes before anything else (block 0, thread 0), then acknowledges into
// the peer's area (remote->zc_ack[slot] = 1, after a system fence).
struct ZcBind {
  uint64_t base;
  uint64_t size;
  PairSection* remote;  // section `rank` of the peer's area
  int32_t peer;
  int32_t slot;
};
constexpr int kMaxLaunchBinds = 2;

// DevChannel::direct: the pair shares this process (posts are addresses) / is in two processes
// (posts name zero-copy slots: stream_zc.h). Both sides of a pair agree (in-process is symmetric;
// kDirectIpc follows from Options::stream_direct_ipc_min, equal on both: AreaHeader). The threshold
// of a channel's candidates: direct_min_of.
constexpr int32_t kDirectLocal = 1;
constexpr int32_t kDirectIpc = 2;

struct DevChannel {
  int16_t kind;         // StreamOpKind
  int16_t peer;
  int16_t first_op;     // ops[first_op, first_op + nops) in call order
  int16_t nops;
  int16_t first_block;  // blocks [first_block, first_block + nblocks) of the grid
  int16_t nblocks;
  int32_t direct;       // NCCL form, zero-copy candidates (is_direct) posted: kDirectLocal / kDirectIpc, else 0
  PairSection* mine;    // this rank's section for `peer`
  PairSection* remote;  // section `rank` of the peer's area, mapped here
};

PL_STREAM_HD inline uint64_t direct_min_of(int32_t direct, uint64_t direct_min, uint64_t direct_ipc_min) {
  return direct == kDirectLocal ? direct_min : direct == kDirectIpc ? direct_ipc_min : 0;
}

// Everything of a launch but its ops and channels (the device code's view: Ctx).
struct StreamLaunchHeader {
  int32_t nch;
  int32_t nblocks;  // grid size: the sum of the channels' blocks
  int32_t pdl;      // launched with programmatic dependent launch
  uint32_t slots;
  int32_t acq_load;  // Options::stream_acquire_load
  int32_t threads;  // per block: Options::stream_threads or stream_threads_for(largest message)
  uint64_t chunk;
  uint64_t timeout_ns;
  uint32_t* error;       // host-mapped
  uint64_t ll_max;       // Options::stream_ll_max (rounded up to 8; 0 = no LL)
  uint64_t ll_slot;      // pub_ll_slot_bytes(ll_max): stride of the published-form LL ring
  uint64_t staging_off;  // staging_offset(true, ll_max)
  uint64_t direct_min;   // Options::stream_direct_min (0 = no zero-copy NCCL form)
  uint64_t direct_ipc_min;  // Options::stream_direct_ipc_min (between processes; 0 = none)
  ZcEntry* zc_table;     // device: this rank's zero-copy table [world][kZcSlots] (stream_zc.h)
  uint8_t* zc_seen;      // host-mapped [world][kZcSlots]: a recv found the slot acknowledged
  int32_t nbinds;
  int32_t pad_binds;
  ZcBind binds[kMaxLaunchBinds];
};

// The kernel's parameter block. The host builds the largest form; launch_stream_batch passes a
// launch that fits in kSmallLaunchOps / kSmallLaunchChannels (a send, a recv, a sendrecv pair) in
// the small one: ~0.4 KB instead of ~3.8 KB of parameters per launch. One-GPU stand-in, graph,
// 8 B-4 KB (three runs): published form -0.07 to -0.14 us in a sendrecv group
// and -0.03 to -0.07 ping-pong one-way; NCCL form within +-0.05.
template <int Ops, int Channels>
struct StreamLaunchOf : StreamLaunchHeader {
  DevOp ops[Ops];
  DevChannel ch[Channels];
};
constexpr int kSmallLaunchOps = 4;
constexpr int kSmallLaunchChannels = 4;
using FullLaunch = StreamLaunchOf<kMaxLaunchOps, kMaxLaunchChannels>;
struct StreamLaunch : FullLaunch {};  // a class, so that host headers can declare it
static_assert(sizeof(StreamLaunch) <= 4000, "kernel parameter limit");

// Launches the batch (grid l.nblocks, PDL when l.pdl) on `stream` (cudaStream_t / hipStream_t). Throws GpuError/Error on a launch error.
void launch_stream_batch(const StreamLaunch& l, void* stream);

}  // namespace peerlink::stream
