// The boundary between host code and the kernels of the non-allreduce collectives
// (coll_kernels.cu). Host-only builds link coll_launch_none.cpp instead (UnsupportedError).
#pragma once
#include <cstddef>

#include "collectives/coll_plan.h"
#include "collectives/device_launch.h"
#include "peerlink/options.h"  // CollAlgo

namespace peerlink::coll {

struct CollLaunchArgs {
  // The allreduce fields the shared device protocol reads (device_sync.h): rank, world, blocks,
  // threads, layout, data, flags, error, timeout_ns, pdl; plus src/dst/dtype/op.
  LaunchArgs a;
  CollDesc d;
  size_t chunk = 0;      // elements per piece per step (push path)
  size_t steps = 0;      // push path: steps (all_to_all_v: 0, agreed on the device by a header step)
  size_t per_block = 0;  // push path: elements of a chunk per block (multiple of 16 bytes)
  bool ll = false;       // one step through LL lines
  size_t ll_words_per_block = 0;  // LL: 8-byte words of each piece per block
  bool ll128 = false;    // one step through LL128 lines (coll_ll128_kernels.cu; not all_to_all_v)
  bool two_hop = false;  // push path, the two-hop plan of broadcast / reduce (coll_two_hop.h)
};

// Enqueues the collective on `stream`. Throws InvalidArgument / GpuError when the launch fails.
void launch_collective(const CollLaunchArgs& c, void* stream);
// The LL128 kernel's launch (called by launch_collective); threads a multiple of the warp size.
void launch_coll_ll128(const CollLaunchArgs& c, void* stream);

// Copy-engine path (coll_ce.cpp): one flag step of block 0's protocol with no data (signal every
// peer, wait for every peer, advance every block's counter). `entry`: one or two such steps so that
// the call's first data step gets an even sequence number, i.e. data step k uses scratch slot k & 1
// whatever the device counter was (the host bakes slot addresses into the copies; the sequence
// numbers stay on the device, so graph replays need no host work). Uses a.rank, world, flags,
// error, timeout_ns. Host-only builds: UnsupportedError.
void launch_ce_step(const LaunchArgs& a, bool entry, void* stream);

// Zero-copy path (coll_zero_copy.cpp): one flag step like launch_ce_step(entry = false) that also
// publishes `call_tag` (this rank's window offset and call shape) to every peer and compares the
// peers' tags with it; a difference is recorded as kErrWindowMismatch in the error word.
void launch_zc_step(const LaunchArgs& a, uint64_t call_tag, void* stream);
// Zero-copy path: to[i] <- from[i] for i < n by push_blocks blocks (each striding over every
// copy), and own_to <- own_from by own_blocks more blocks when own_bytes > 0. With `swap` (the
// in-place all_to_all) the n ranges are exchanged instead: to[i] <-> local[i] (from unused).
struct ZcCopyArgs {
  const char* from[kMaxRanks] = {};
  char* to[kMaxRanks] = {};
  char* local[kMaxRanks] = {};
  size_t bytes[kMaxRanks] = {};
  int n = 0;
  bool swap = false;
  const char* own_from = nullptr;
  char* own_to = nullptr;
  size_t own_bytes = 0;
  int push_blocks = 1, own_blocks = 1, threads = 512;
};
void launch_zc_copy(const ZcCopyArgs& c, void* stream);

// Zero-copy broadcast on 3+ ranks (zc_relay.cpp): scatter, then all-gather, pipelined by chunks.
// The root's buffer is cut into one part per non-root. The root copies part q into its owner's
// recvbuf chunk by chunk, each chunk followed by a flag in that rank's inbox[1][chunk][root]
// (the call's entry sequence number: no reset); a non-root forwards each chunk of its own part,
// once its flag is there, from its recvbuf into every other non-root's. Every link then carries
// about the buffer once (the plain push sends it world - 1 times out of the root).
struct ZcRelayArgs {
  int root = 0;
  bool is_root = false;
  int n = 0;                          // root: one copy per part; non-root: one per other non-root
  const char* from[kMaxRanks] = {};   // non-root: every from[i] is its part in its own recvbuf
  char* to[kMaxRanks] = {};           // in the peers' windows
  int to_rank[kMaxRanks] = {};        // root: the rank that owns part i (gets its chunk flags)
  size_t bytes[kMaxRanks] = {};
  size_t chunk = 0;                   // bytes per flagged chunk, a multiple of 16; chunks <= kRelayMaxChunks
  const char* own_from = nullptr;     // root out of place: its own copy
  char* own_to = nullptr;
  size_t own_bytes = 0;
  int push_blocks = 1, own_blocks = 1, threads = 512;
};
constexpr size_t kRelayMaxChunks = 128;  // <= kMaxBlocks: chunk j's flag is inbox[1][j][root]
static_assert(kRelayMaxChunks <= size_t(kMaxBlocks), "a relay chunk flag is an inbox block slot");
void launch_zc_relay(const LaunchArgs& a, const ZcRelayArgs& r, void* stream);

// Copy-engine path of reduce / reduce_scatter: out[i] = reduce(ins[0][i], .., ins[nin-1][i]) for
// i < count (512 threads per block, `blocks` blocks of per_block elements, a multiple of 16 bytes).
struct CeReduceArgs {
  const void* ins[kMaxRanks] = {};
  int nin = 0;
  void* out = nullptr;
  // launch_zc_pull only: more outputs that get the same result (the zero-copy allreduce's shard in
  // the peers' recvbufs, zc_allreduce.cpp).
  void* extra_outs[kMaxRanks] = {};
  int nextra = 0;
  size_t count = 0, per_block = 0;
  int blocks = 1, dtype = 0, op = 0;
};
void launch_ce_reduce(const CeReduceArgs& r, void* stream);
// Zero-copy path of reduce / reduce_scatter: as launch_ce_reduce (512 threads per block), the
// inputs read with several 16-byte loads in flight per thread (peers' sendbufs over the link).
void launch_zc_pull(const CeReduceArgs& r, void* stream);

// Loads, on the current device, every kernel that a call launches after a kernel of the same call
// that waits for the peers (the copy-engine and zero-copy paths' copies, reductions and exit
// steps): gpu::dev::preload says why. Called once per communicator at setup.
void preload_multi_kernel_paths();

struct CollState;
// Enqueues a collective other than all_to_all_v (d.kind) on `stream` through the copy engines
// (reducing kinds: copies in, a reduction kernel per step on the receiver).
void ce_collective(CollState& st, const CollDesc& d, int dtype, int op, const void* src, void* dst, void* stream);

struct Window;
// Zero-copy path (coll_zero_copy.cpp): all_gather, all_to_all and broadcast copy their pieces
// straight into the peers' recvbufs (in window `w` at dst's offset on every rank); reduce and
// reduce_scatter read the peers' sendbufs in place (in `w` at src's offset on every rank).
// GPU: stream-ordered (copy engines between two flag steps); host backend: synchronous memcpy.
// Throws InvalidArgument when a write would leave a peer's window, before anything moves.
void zc_collective(CollState& st, const CollDesc& d, int dtype, int op, const Window& w, const void* src, void* dst,
                   void* stream);

// Zero-copy allreduce (zc_allreduce.cpp): sendbuf in window `ws`, recvbuf in `wr`, at the same
// offsets on every rank; each rank reduces its shard from every sendbuf and stores it into every
// recvbuf. Throws InvalidArgument when a range would leave a peer's window, before anything moves.
void zc_allreduce(CollState& st, const Window& ws, const Window& wr, const void* src, void* dst, size_t count,
                  size_t elem, int dtype, int op, void* stream);

// Host backend: runs the collective synchronously (same plan, one "block") by `algo`: LL, LL128, or
// the push plan for anything else.
void host_collective(CollState& st, const CollDesc& d, int dtype, int op, const void* src, void* dst, CollAlgo algo);

}  // namespace peerlink::coll
