// Shared-memory layout of the stream-ordered point-to-point engine (stream_p2p.h), used by the host
// implementation (stream_host.cpp) and, for GPUs, by the kernels. Plain integers only (no
// std::atomic): host code accesses them with __atomic builtins, device code with volatile loads and
// system-scope release stores.
//
// Every rank owns one "area" (an exportable allocation of its device, or host SHM), published to
// each peer under the reserved buffer id kAreaBufId. Section q of rank r's area holds:
//   - the words peer q writes for r (q's posted recvs from r, q's ready messages/chunks to r,
//     q's consumed chunks of r's messages), each on its own cache line;
//   - the descriptor rings q fills before those release stores;
//   - r's own sequence counters for the pair (r, q) (device-resident on GPUs, so a graph replay
//     advances them: nothing host-side is baked into a captured launch);
//   - the staging slots that q's NCCL-form messages to r are copied through.
// A waiter always spins on its own area; the peer writes remotely (one store crosses the link).
#pragma once
#include <cstddef>
#include <cstdint>

// The helpers below that kernels call too.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define PL_STREAM_HD __host__ __device__
#else
#define PL_STREAM_HD
#endif

namespace peerlink::stream {

// Buffer ids at or above kReservedBufBase belong to the library (the stream engine publishes its
// area under kAreaBufId); user calls naming them get InvalidArgument.
constexpr uint32_t kReservedBufBase = 0xFFFFFF00u;
constexpr uint32_t kAreaBufId = 0xFFFFFF01u;
constexpr uint64_t kAreaMagic = 0x706c5354524d3038ull;  // "plSTRM08" (in-place zero-copy exchange)
constexpr int kDescRing = 64;   // published-form recvs posted ahead of completion, per pair
constexpr int kMaxSlots = 64;   // NCCL-form staging slots per ordered pair (at most)
// NCCL-form zero-copy posts (Options::stream_direct_min) in flight per pair: more than a launch
// holds (kMaxLaunchOps), so a launch never overwrites a post it made itself.
constexpr int kDirectRing = 64;
// NCCL-form zero-copy between processes (stream_zc.h): receive allocations one rank exports to one
// peer, each under its own reserved buffer id kZcBufBase + slot, never reused.
constexpr int kZcSlots = 64;
constexpr uint32_t kZcBufBase = 0xFFFFFF40u;
static_assert(kZcBufBase >= kReservedBufBase && kZcBufBase + kZcSlots <= 0xFFFFFFFFu && kAreaBufId < kZcBufBase,
              "zero-copy ids are reserved ids of their own");

// Status of a published-form message (ReadyDesc::status).
constexpr uint32_t kStatusOk = 1;
constexpr uint32_t kStatusMismatch = 2;  // the sender's (buf_id, offset, len) differed: nothing written

struct alignas(64) Line {
  uint64_t v;
  uint64_t pad[7];
};

struct AreaHeader {
  uint64_t magic;
  uint64_t world;
  uint64_t slots;          // NCCL-form staging slots per pair
  uint64_t chunk;          // bytes per staging slot
  uint64_t section_bytes;  // bytes per peer section (flags + staging)
  uint64_t ll_max;         // GPU: Options::stream_ll_max (rounded up to 8); the LL ring follows it
  uint64_t direct_min;     // GPU: Options::stream_direct_min (0 on the host backend)
  uint64_t direct_ipc_min; // GPU: Options::stream_direct_ipc_min (0 on the host backend)
};

// NCCL-form zero-copy post (stream_raw_device.h): {address low, tag, address high, tag}, written by
// the receiver as one 16-byte line (two 8-byte halves, each a unit, as an LL line), tag = the low 32
// bits of the pair's zero-copy message number; address 0 = "not this time: stage it". Between
// processes the "address" is kPostIpc | slot << 48 | offset: the offset into the receive allocation
// the receiver exported under zero-copy slot `slot`, which the sender looks up in its own table.
struct alignas(16) DirectPost {
  uint32_t addr_lo, tag0, addr_hi, tag1;
};
constexpr uint64_t kPostIpc = uint64_t(1) << 63;
// A post of a recv whose bytes its own rank's send of the same launch reads (in place, zero-copy:
// stream_swap_device.h): the sender writes each unit only once the receiver's gate for it opened.
constexpr uint64_t kPostGated = uint64_t(1) << 62;
constexpr uint64_t kPostOffsetMask = (uint64_t(1) << 48) - 1;
PL_STREAM_HD constexpr uint64_t ipc_post(uint64_t slot, uint64_t offset) { return kPostIpc | slot << 48 | offset; }

// Written by the receiver together with `pub_posted`: what its k-th published-form recv expects.
struct PostDesc {
  uint64_t seq;
  uint64_t offset;
  uint64_t len;
  uint32_t buf_id;
  uint32_t pad;
};
// Written by the sender before `pub_ready`: how its k-th published-form send went, and what it named.
struct ReadyDesc {
  uint64_t seq;
  uint64_t offset;
  uint64_t len;
  uint32_t buf_id;
  uint32_t status;
};
// Written by the sender with the bytes of a staged chunk, before `raw_ready`.
struct ChunkHdr {
  uint64_t msg;        // 1-based NCCL-form message number of the pair
  uint64_t msg_len;    // total bytes of that message
  uint64_t chunk_off;  // offset of this chunk inside the message
  uint64_t chunk_len;
};

// Chunks of in-place recvs from one peer that one launch can order (PairSection::gate): with
// 128 KB chunks, 1 GB.
constexpr uint32_t kGateCap = 8192;
// In-place zero-copy exchanges (stream_swap_device.h) gate their messages in units of this many
// bytes: a block of 512 threads holds two units in registers (2 x 4 x 16 bytes per thread), at most
// kSwapGateCap units per recv channel and launch (512 MB).
constexpr uint64_t kSwapUnit = 32 << 10;
constexpr uint32_t kSwapGateCap = 16384;
// From this many bytes a block's next unit is loaded and opened before its current unit is stored,
// instead of being loaded while the current one is stored (stream_swap_device.h). 2x H200,
// sendrecv_perf -g 2 -G 100 in place, two runs each, overlapped / opened early, us:
// 16 MB 59.40-59.47 / 59.46-59.48, 32 MB 105.37-105.43 / 105.37-105.38, 64 MB 198.48-198.52
// / 197.97-197.98, 128 MB 383.31-383.33 / 382.13-382.14, 256 MB 753.37-753.47 / 750.54-750.75
// (NCCL -R 0: 59.37, 105.87, 201.25, 385.49, 752.08).
constexpr uint64_t kSwapEarlyMin = uint64_t(64) << 20;
PL_STREAM_HD constexpr uint64_t swap_units(uint64_t len) { return (len + kSwapUnit - 1) / kSwapUnit; }

struct PairSection {
  // Written by the peer q (remote stores into this rank's area).
  Line pub_posted;    // q posted its pub_posted-th published-form recv from this rank
  Line pub_ready;     // q's pub_ready-th published-form send to this rank has landed
  Line raw_ready;     // q staged raw_ready chunks (total) into this section's slots
  Line raw_consumed;  // q copied out raw_consumed chunks (total) of this rank's messages to q
  // GPU NCCL form: one flag per staging slot instead of the two totals above (the host backend keeps
  // the totals). Several blocks move different chunks at once and finish in any order, so a total
  // could go backwards; a per-slot flag holds the number (g + 1) of the chunk g last staged /
  // consumed there, which only grows (slot s is reused by chunk g + slots only after chunk g was
  // consumed).
  Line raw_slot_ready[kMaxSlots];     // q staged chunk (value - 1) in slot s
  Line raw_slot_consumed[kMaxSlots];  // q copied out chunk (value - 1) of this rank's from slot s
  PostDesc post[kDescRing];
  ReadyDesc ready[kDescRing];
  ChunkHdr hdr[kMaxSlots];
  // This rank's own counters for the pair (only this rank writes them).
  Line pub_sent;      // published-form sends issued to q
  Line pub_recvd;     // published-form recvs issued from q
  Line raw_sent_msgs, raw_sent_chunks;   // NCCL-form messages/chunks issued to q
  Line raw_recvd_msgs, raw_recvd_chunks; // NCCL-form messages/chunks issued from q
  Line raw_recvd_deferred;               // GPU: the first chunk whose slot the last launch left to the next (stream_raw_device.h)
  Line error;         // GPU: first device-side failure on this pair (see stream_kernels.cu)
  // GPU: the blocks of one channel (stream_kernels.cu). exit[kind] counts the channel's blocks that
  // finished the current launch (the last one writes the channel's counters above, then resets it
  // to 0); pub_arrive[k % kDescRing] counts the blocks that finished their part of published-form
  // message k (the last one publishes pub_ready, then resets it to 0). Both are back to 0 before
  // any later launch or message can use them, so nothing needs resetting from the host.
  Line exit[6];
  uint64_t pub_arrive[kDescRing];
  // GPU copy-engine sends (stream_ce_device.h, kinds kChCeWait / kChCeDone): what the waiting kernel
  // found for message k (kStatusOk / kStatusMismatch), read by the publishing kernel.
  uint64_t ce_status[kDescRing];
  // GPU NCCL-form zero-copy messages (stream_direct_device.h says how):
  DirectPost direct_post[kDirectRing];  // written by the peer q (receiver): where zero-copy message d goes
  Line direct_done;       // written by q (sender): its zero-copy messages to this rank up to here landed
  Line direct_sent;       // this rank's zero-copy messages sent to q / received from q (own counters)
  Line direct_recvd;
  uint64_t direct_arrive[kDirectRing];  // blocks that finished their share of zero-copy message d (own)
  // Between processes (stream_zc.h): written by q (sender), 1 once q mapped this rank's receive
  // allocation exported under zero-copy slot s and entered it in its table.
  uint64_t zc_ack[kZcSlots];
  // Own: block 0's choice for zero-copy candidate d between processes, read by the channel's other
  // blocks (2d + 1 zero-copy, 2d staged).
  uint64_t direct_choice[kDirectRing];
  // Own, GPU NCCL form in place (a recv from q into the very bytes that a send of the same launch
  // reads; host side: stream_gate.cpp): gate[base + j] = 1 once the send's block read chunk j; the
  // recv's block of chunk j waits for it before it writes a byte there, then sets it back to 0.
  uint32_t gate[kGateCap];
  // In-place zero-copy exchanges (stream_swap_device.h), both written by the peer q:
  // direct_gate[d % kDirectRing] = tag << 32 | base when q posted zero-copy message d gated (its gates
  // are swap_gate[base...]); swap_gate[base + u] = tag once q's send read unit u of the bytes this
  // rank's message d overwrites. Tags (swap_tag(d)) never repeat in place: nothing is reset.
  uint64_t direct_gate[kDirectRing];
  uint32_t swap_gate[kSwapGateCap];
};

// GPU LL lines (messages of at most Options::stream_ll_max bytes, "ll_max"; both sides agree: it is in
// the AreaHeader). Each 16-byte line is {data[0..3], f, data[4..7], f} with f = ll_flag(k) for
// message k, two 8-byte halves each written and read as a unit (gpu/device.h store_volatile_16), so
// the receiver knows a line landed when both flags match: no fence on the sender, no separate flag,
// one NVLink crossing. A message is two header lines {w0, f, w1, f} {w2, f, w3, f} then its bytes,
// ceil(len / 8) lines; several blocks of a send each write their own range of lines (block 0 the
// header too) and several blocks of a recv each read and zero their own range: no fence, no arrive
// counter on either side. Flags are never 0 and a line is zeroed by the receiver after it was read,
// so a stale line reads 0 and no flag value ever repeats in place.
//   Published form: the sender writes message k into the receiver's ring slot k % kLLSlots (slot
//   stride pub_ll_slot_bytes(ll_max), header {buf_id, len, offset low, offset high}) without waiting
//   for the posted recv; the receiver, which still posts k and waits for pub_ready or the header,
//   whichever comes (so a length mismatch across the ll_max boundary is seen, never a hang), checks
//   the header against its recv (mismatch: every line drained, nothing written) and copies the data
//   into its buffer. Credit: the receiver posts recv k + 1 only after slot k was emptied (its data
//   lines zeroed by the blocks that read them, in that launch, and its header lines zeroed by thread
//   0 just before it posts k + 1: every block of the recv reads the header, so only the next post,
//   after the launch or in the same one-block launch, may clear it), so the sender of k may use slot
//   k % kLLSlots once pub_posted >= k + 1 - kLLSlots.
//   NCCL form: a message of len <= ll_max is ceil(len / ll_piece(len)) chunks (one when empty), chunk g
//   sent as LL lines (header {msg low, msg len, msg high, piece index}) into the LL area of its
//   staging slot g % slots instead of staged data plus a flag; same per-slot credit; the receiving
//   block zeroes the header itself (one block reads a piece). An LL area only ever holds LL lines or
//   zeros, never staged user bytes that could look like a valid line.
// Why pieces of 8 KB: one block of 512 threads writes 1024 lines (2 per thread) in one pass.
constexpr size_t kLLPiece = 8 << 10;
constexpr size_t kLLMaxCap = 512 << 10;  // Options::stream_ll_max's bound (= kMaxSlots pieces)
constexpr size_t kLLSlots = 8;
PL_STREAM_HD constexpr size_t ll_lines(size_t len) { return (len + 7) / 8; }
constexpr size_t kLLSlotBytes = (2 + ll_lines(kLLPiece)) * 16;  // one NCCL-form LL area
// (ll_flag(k) = k mod (2^32 - 1) + 1: stream_device.h.)
PL_STREAM_HD constexpr bool is_ll(uint64_t len, uint64_t ll_max) { return ll_max > 0 && len <= ll_max; }
// The bytes per chunk of an NCCL-form message, from its length alone (both sides agree): LL pieces
// up to ll_max; half a staging slot up to kHalfChunkMax bytes (twice the chunks, so twice the
// blocks and a pipeline twice as deep for the medium sizes); the whole slot above. Between
// processes, 2x H100, graph, one way us, whole slots / half up to 2 MB / half up to 4 MB (two runs
// each; 512 KB staged, with stream_ll_max 256 KB): 512 KB 13.6 / 10.4 / 10.5, 1 MB 14.0 / 12.3 /
// 12.3, 2 MB 16.8 / 15.2 / 15.4, 4 MB 22.2 / 22.3 / 21.6, 8 MB 34.2 alike
// (NCCL: 11.1, 15.5, 19.9, 28.4, 46.0).
// On 2x H200 64 KB slots lost from 8 MB on (36.0 against 32.4 us).
constexpr uint64_t kHalfChunkMax = uint64_t(4) << 20;
// LL pieces of 4 KB (one line per thread of 512, so twice the blocks) for messages above 8 KB up
// to 128 KB (at most 32 pieces: all handed back late, late_from); 8 KB pieces above, where 4 KB
// ones would fill the 64 slots (256 KB: 64 pieces). nccl-tests sendrecv_perf -g 2 -G 100, 2x H100,
// out of place, 8 KB / 4 KB pieces (with recv_raw's load beside g0), two runs each:
// 16 KB 5.75 / 5.38-5.40 us, 64 KB 5.88-5.90 / 5.40-5.41, 128 KB 6.32 / 5.54 (NCCL best
// 8.03); one way (bench_transport, between processes) 128 KB 6.30-6.34 / 5.12-5.14.
constexpr uint64_t kLLSmallPiece = 4 << 10, kLLSmallPieceMax = 128 << 10;
PL_STREAM_HD constexpr uint64_t ll_piece(uint64_t len) {
  return len > kLLPiece && len <= kLLSmallPieceMax ? kLLSmallPiece : kLLPiece;
}
PL_STREAM_HD constexpr uint64_t raw_piece(uint64_t len, uint64_t chunk, uint64_t ll_max) {
  return is_ll(len, ll_max) ? ll_piece(len) : len <= kHalfChunkMax ? chunk / 2 : chunk;
}
// log2 of a power of two (raw_piece is one: kLLPiece, kLLSmallPiece, half or all of the engine's
// power-of-two chunk), so kernels count chunks with a shift, not a 64-bit division.
// (clang, HIP's device compiler included, lowers the builtin itself; nvcc's device code needs __clzll.)
PL_STREAM_HD inline int log2_pow2(uint64_t m) {
#if defined(__CUDA_ARCH__)
  return 63 - __clzll(static_cast<long long>(m));
#else
  return 63 - __builtin_clzll(m);
#endif
}
// Chunks of an NCCL-form message: pieces of raw_piece() bytes; one empty chunk when len is 0. The
// one count that the kernels (stream_raw_device.h), block assignment (stream_gpu_launch.cpp) and the
// in-place gates (stream_gate.cpp) share.
PL_STREAM_HD inline uint64_t raw_chunks(uint64_t len, uint64_t chunk, uint64_t ll_max) {
  return len ? (len + raw_piece(len, chunk, ll_max) - 1) >> log2_pow2(raw_piece(len, chunk, ll_max)) : 1;
}
// The first chunk of an NCCL-form receiving launch (chunks [g0, g_last], run of them) whose slot it
// hands back only at the start of the channel's next launch (stream_raw_device.h, recv_raw): the
// chunks whose slot the sender needs neither in this launch nor in a next launch of the same run
// (g + slots > g_last + run), and always g_last itself. So a late slot is never reused within its
// launch, and there are at most `slots` of them (tests/unit/stream_late_slots_test.cpp).
PL_STREAM_HD constexpr uint64_t late_from(uint64_t g0, uint64_t g_last, uint64_t run, uint64_t slots) {
  return g_last + 1 + run <= slots + g0 ? g0 : g_last + 1 + run - slots < g_last ? g_last + 1 + run - slots : g_last;
}
// An NCCL-form message that the pair's two sides handle as a zero-copy candidate (the receiver posts
// an address, or 0; the sender waits for the post): both compute it from the length alone, on a
// channel whose pair shares a process (DevChannel::direct).
PL_STREAM_HD constexpr bool is_direct(uint64_t len, uint64_t direct_min, uint64_t ll_max) {
  return direct_min > 0 && len >= direct_min && !is_ll(len, ll_max);
}

constexpr size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }
constexpr size_t pub_ll_slot_bytes(size_t ll_max) { return ll_max ? round_up((2 + ll_lines(ll_max)) * 16, 128) : 0; }
constexpr size_t kHeaderBytes = 4096;
constexpr size_t flags_bytes() { return round_up(sizeof(PairSection), 4096); }
// GPU sections: flags | NCCL-form LL areas (one per staging slot, fixed size) | published-form LL
// ring (kLLSlots slots, stride pub_ll_slot_bytes(ll_max)) | staging slots. Host sections have no LL
// regions (the host backend copies with memcpy and flags).
constexpr size_t raw_ll_offset() { return flags_bytes(); }
constexpr size_t pub_ll_offset() { return flags_bytes() + kMaxSlots * kLLSlotBytes; }
constexpr size_t ll_bytes(size_t ll_max) {
  return round_up(kMaxSlots * kLLSlotBytes + kLLSlots * pub_ll_slot_bytes(ll_max), 4096);
}
constexpr size_t staging_offset(bool gpu, size_t ll_max) { return flags_bytes() + (gpu ? ll_bytes(ll_max) : 0); }
constexpr size_t section_bytes(size_t slots, size_t chunk, bool gpu, size_t ll_max) {
  return staging_offset(gpu, ll_max) + slots * chunk;
}
constexpr size_t area_bytes(int world, size_t slots, size_t chunk, bool gpu, size_t ll_max) {
  return kHeaderBytes + size_t(world) * section_bytes(slots, chunk, gpu, ll_max);
}

inline PairSection* section(void* area, int q, size_t sec_bytes) {
  return reinterpret_cast<PairSection*>(static_cast<char*>(area) + kHeaderBytes + size_t(q) * sec_bytes);
}
// Host backend only (GPU kernels place staging after the LL regions: staging_offset(true)).
inline char* staging(PairSection* s, size_t slot, size_t chunk) {
  return reinterpret_cast<char*>(s) + staging_offset(false, 0) + slot * chunk;
}

}  // namespace peerlink::stream
