// Per-communicator configuration (layer config/, below bootstrap, topology, transport and
// collectives). Every knob of the library is a field here, read from its PEERLINK_* variable by
// from_env() and checked by validate(); nothing else in the library reads the environment. Resolved
// when a communicator is created (never cached in statics), so a program can give each communicator
// its own values. What each knob does, its values and default: docs/configuration.md (generated
// from the one registry of knobs, src/config/knobs.cpp).
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "peerlink/log_level.h"

namespace peerlink {

constexpr int kHostDevice = -1;  // device index of the host-memory backend (POSIX SHM)

// How a send's completion reaches the receiver.
enum class Completion {
  Auto,     // done_seq channel when it becomes ready, else the SHM ring with per-message ACK
  DoneSeq,  // done_seq channel; failure to set it up is an error
  Ring,     // legacy SHM ring with per-message ACK
};

// Which data path a pair uses.
enum class Path {
  Auto,    // topology policy (direct when peer-to-peer is allowed, relay otherwise)
  Direct,  // sender copies straight into the receiver's published buffer
  Relay,   // staged through a pinned host SHM ring
};

namespace detail {
struct TestHooks;  // the library's own test switches (internal)
}  // namespace detail

// Which algorithm carries an allreduce (Options::allreduce_algo / PEERLINK_ALLREDUCE_ALGO).
enum class AllreduceAlgo {
  Auto,       // chosen by message size and world size (measured crossovers)
  OneShot,    // every rank pushes its whole input to every peer, each rank reduces everything
  TwoShot,    // reduce-scatter + all-gather, each rank reduces 1/n, latency-sized grid
  Bandwidth,  // the two-shot data flow on the whole GPU, pipelined over scratch chunks
  ZeroCopy,   // sendbuf and recvbuf in registered windows: each rank reads its shard of every
              // rank's sendbuf in place and stores the result into every rank's recvbuf
};

// Which algorithm carries all_gather, reduce_scatter, broadcast, reduce, all_to_all(_v)
// (Options::<collective>_algo / PEERLINK_<COLLECTIVE>_ALGO).
enum class CollAlgo {
  Auto,  // by message size (all_to_all_v: always Push, its sizes differ per rank)
  LL,    // one step of flag-in-data lines; pieces up to allreduce_ll_max bytes (host backend: 16 KB)
  // One step of LL128 lines (128 bytes: 120 of data, an 8-byte flag); pieces up to
  // allreduce_ll128_max bytes, GPUs only, where every pair is NVLink or one GPU (as allreduce's).
  LL128,
  Push,  // chunks pushed into the receivers' mapped scratch, per-block flags
  // Copy engines (all_to_all_v and the host backend run Push instead): chunks copied into the
  // receivers' scratch by cudaMemcpyAsync, one small kernel per step for the flags, the receiver's
  // scratch-to-output copy (reduce, reduce_scatter: a reduction kernel) on a forked stream.
  CopyEngine,
  // Straight into the peers' recvbufs (all_gather, all_to_all, broadcast; GPU by copy engines, the
  // host backend by memcpy), when recvbuf lies in a registered window (peerlink/windows.h); forced
  // on a buffer outside any window it is InvalidArgument.
  ZeroCopy,
  // broadcast and reduce only (forced on another collective it is InvalidArgument): the buffer cut
  // into one shard per non-root rank, which relays its shard (broadcast) or reduces it (reduce), so
  // no link carries the buffer more than about once; one more step than Push (coll_plan.h).
  TwoHop,
};

// How memory exported by file descriptor reaches a peer (Options::fd_passing / PEERLINK_FD_PASSING).
enum class DescriptorPassing {
  Auto,    // pidfd_getfd where the kernel allows it (ptrace permission), else the job's Unix socket
  Pidfd,   // pidfd_getfd only (no socket thread in the exporter); EPERM is an error
  Socket,  // SCM_RIGHTS over the exporter's abstract Unix socket only
};

// Upper bound of Options::allreduce_blocks: the flag area holds this many blocks per rank
// (collectives/layout.h kMaxBlocks, checked there with a static_assert).
constexpr int kMaxAllreduceBlocks = 160;

// The knobs. Defaults are the member initializers below (docs/configuration.md shows them); where a
// default was decided by a measurement, the comment says which.
struct Options {
  // ---- what most programs set
  std::chrono::milliseconds timeout{60000};  // bound of every wait (PEERLINK_TIMEOUT_MS)
  LogLevel log_level = LogLevel::Warn;       // PEERLINK_DEBUG=WARN|INFO|TRACE|NONE
  Completion completion = Completion::Auto;  // PEERLINK_COMPLETION=auto|done_seq|ring
  Path path = Path::Auto;                    // PEERLINK_TRANSPORT=auto|direct|relay
  bool p2p_disable = false;                  // PEERLINK_P2P_DISABLE (else NCCL_P2P_DISABLE): relay every GPU pair
  std::string p2p_level;                     // PEERLINK_P2P_LEVEL (else NCCL_P2P_LEVEL); "" = the topology default
  std::string topo_file;                     // PEERLINK_TOPO_FILE (else NCCL_TOPO_FILE): an NCCL topology XML
  DescriptorPassing fd_passing = DescriptorPassing::Auto;  // PEERLINK_FD_PASSING=auto|pidfd|socket
  // At most this many blocks per collective kernel (allreduce and the others) and per stream
  // send/recv launch, so that work on other streams keeps the rest of the GPU (NCCL's maxCTAs;
  // PEERLINK_MAX_BLOCKS, else NCCL_MAX_CTAS, [0, kMaxAllreduceBlocks]); 0 = no cap. The ranks use
  // the smallest cap any of them asks for.
  int max_blocks = 0;
  // Programmatic dependent launch of the collective kernels (PEERLINK_ALLREDUCE_PDL) and of the
  // stream send/recv kernels (PEERLINK_STREAM_PDL): 0 / 1; -1 = on for compute capability >= 9.0,
  // never below. A user kernel launched with PDL after one of them must call
  // cudaGridDependencySynchronize() before reading its result.
  int allreduce_pdl = -1;
  int stream_pdl = -1;
  // Zero-copy for buffers nobody registered, in CUDA graphs (NCCL_GRAPH_REGISTER's model;
  // PEERLINK_COLL_GRAPH_REGISTER; not read from NCCL_GRAPH_REGISTER, whose values other than 0 all
  // mean what 1 means here): a collective captured into a graph
  // whose zero-copy buffer is in no window, and whose pieces are large enough for the zero-copy
  // path, registers that buffer as a window of its own on every rank while being captured (one host
  // exchange, at capture time only); the window lives as long as the graphs that captured it.
  // 1 = on; 0 = off; 2 = also on eager calls (each such call then exchanges on the host: for tests).
  // With it on, every rank must capture the collectives that any rank captures.
  int coll_graph_register = 1;

  // ---- algorithm overrides (every rank must agree); Auto = chosen by size, world and windows.
  AllreduceAlgo allreduce_algo = AllreduceAlgo::Auto;  // PEERLINK_ALLREDUCE_ALGO
  CollAlgo all_gather_algo = CollAlgo::Auto;           // PEERLINK_ALL_GATHER_ALGO
  CollAlgo reduce_scatter_algo = CollAlgo::Auto;       // PEERLINK_REDUCE_SCATTER_ALGO
  CollAlgo broadcast_algo = CollAlgo::Auto;            // PEERLINK_BROADCAST_ALGO
  CollAlgo reduce_algo = CollAlgo::Auto;               // PEERLINK_REDUCE_ALGO
  CollAlgo all_to_all_algo = CollAlgo::Auto;           // PEERLINK_ALL_TO_ALL_ALGO (also all_to_all_v)

  // ---- transport tuning.
  // How long the lower rank of a pair waits for the higher rank to open the done_seq channel before
  // both switch that pair to the ring path (PEERLINK_CHANNEL_READY_MS).
  std::chrono::milliseconds channel_ready_timeout{5000};
  // Relay staging ring geometry per ordered pair (PEERLINK_RELAY_CHUNK_BYTES, PEERLINK_RELAY_SLOTS).
  size_t relay_chunk_bytes = size_t(4) << 20;
  int relay_slots = 4;
  // Messages at or above this size are striped over several copy streams (GPU only)
  // (PEERLINK_STRIPE_THRESHOLD, PEERLINK_STRIPE_STREAMS). One lane: host path, window 8, 1 / 2 / 3
  // lanes, three runs each (2x H200, 2026-11-28): 256 MB 381.6-383.0 / 379.2-380.9 / 369.5-377.9
  // GB/s, 128 MB 372.8-376.4 / 367.4-369.6 / 362.4-366.2, 64 MB 306.9-311.4 / 300.3-304.6 /
  // 288.0-298.8; on 2x H100 (2026-11-26) 395.4 / 391.3 / 389.1 at 256 MB.
  size_t stripe_threshold = size_t(8) << 20;
  int stripe_streams = 1;
  // GPU sends up to this size are copied by a kernel that also stores done_seq, instead of the copy
  // engine plus a stream write (PEERLINK_KERNEL_COPY_MAX; 0 = always the copy engine). Off: on 2x
  // H200 the kernel measured 13.6 us one-way at 8 B against 9.0 us for the copy engine.
  size_t kernel_copy_max = 0;
  // GPU sends up to 16 KB of the host-driven path run on a kernel launched ahead of the message
  // (PEERLINK_HOST_ARM_US, [0, 10000] us; 0 = off, every send launches its own kernel): the kernel
  // waits for the send's descriptor in mapped host memory and, after it, for the next one's, until
  // the send worker cancels it about this long after the last send (and always before the worker
  // sleeps). A launch costs the host ~4.5 us (src/gpu/armed_lane.h). 2x H100 (2026-11-26), 8 B one
  // way p50 5.6-5.8 us with 50 against 8.2 with 0; 8 in flight 5.5-5.6 against 6.9-7.7 per
  // message. While a kernel waits, one block of the device polls and a cudaDeviceSynchronize waits
  // for it.
  int host_arm_us = 50;
  // Host backend: alloc() makes memfd chunks mapped back to back and exported by descriptor, like a
  // VMM allocation on a GPU, instead of one named POSIX SHM segment (PEERLINK_HOST_FD=0|1), so that
  // every host-backend run (CI) goes through the descriptor machinery. 0 = the named segments (the
  // transport's own segments are named either way).
  bool host_fd = true;
  // Host fd memory: bytes per memfd chunk, page-rounded (PEERLINK_HOST_CHUNK_BYTES; 0 = one chunk).
  size_t host_chunk_bytes = 0;

  // ---- collective tuning (collectives/), applied when a communicator's first collective sets up
  // its state. 0 = the measured defaults.
  // Bytes per scratch region position (PEERLINK_ALLREDUCE_SCRATCH_BYTES, [64, 2^32], rounded up to
  // 64); 0 = 1 MB on the host backend, max(4 MB, 32 MB / world) on GPUs. Every rank must agree.
  size_t allreduce_scratch_bytes = 0;
  int allreduce_threads = 0;  // threads per block (PEERLINK_ALLREDUCE_THREADS, [0, 1024]); 0 = per algorithm
  int allreduce_blocks = 0;   // grid override (PEERLINK_ALLREDUCE_BLOCKS, [0, kMaxAllreduceBlocks]); 0 = auto
  // GPU one-shot messages up to this many bytes use LL lines (PEERLINK_ALLREDUCE_LL_MAX, [0, 2^28],
  // rounded up to 16); every rank must agree.
  size_t allreduce_ll_max = size_t(512) << 10;
  // GPU one-shot messages above allreduce_ll_max and up to this many bytes use LL128 lines (128
  // bytes: 120 of data and an 8-byte flag; PEERLINK_ALLREDUCE_LL128_MAX, [0, 2^26]), where every
  // pair of the communicator is NVLink or one GPU and the runtime is CUDA; else the flag kernel.
  // Sizes 2 * world * ceil(max / 120) * 128 bytes of scratch per rank; every rank must agree.
  size_t allreduce_ll128_max = size_t(4) << 20;
  // The fused allreduce + residual add + RMSNorm (peerlink/fused.h): Auto = by size and world size;
  // OneShot or TwoShot forces that data flow (PEERLINK_FUSED_ALGO; any other value is
  // InvalidArgument). Every rank must agree.
  AllreduceAlgo fused_algo = AllreduceAlgo::Auto;
  // Auto selection of the other collectives (every rank must agree). LL for pieces up to coll_ll_max
  // bytes (PEERLINK_COLL_LL_MAX, [0, 2^28]; also bounded by allreduce_ll_max, which sizes the LL
  // area); copy engines for all_gather, broadcast and all_to_all pieces of at least coll_ce_min bytes
  // (PEERLINK_COLL_CE_MIN; 0 = auto never picks them). Measured on 2x H200 (2026-11-23,
  // scripts/gpu_coll_sweep.sh, bf16 graph): LL up to 512 KB against push at 64 KB: broadcast 4.40 vs
  // 7.19 us at 512 KB, reduce 4.29 vs 6.93, reduce_scatter 5.91 vs 9.33 us at 1 MB; copy engines
  // lost to push kernels at every size 2-128 MB for every op (e.g. all_gather 128 MB 307 vs 258 us).
  // Where LL128 lines are on (allreduce_ll128_max), pieces above 128 KB take them instead of LL
  // (2x H100: all_gather 4 MB 15.47 -> 10.46 us).
  size_t coll_ll_max = size_t(512) << 10;
  size_t coll_ce_min = 0;
  // Copy-engine path: bytes per piece per step (PEERLINK_COLL_CE_CHUNK_BYTES, 0 = the scratch
  // position, allreduce_scratch_bytes' value, which also bounds it) and copy streams for the pushes
  // (PEERLINK_COLL_CE_LANES, [1, 4]: each step's pushes split over that many forked streams).
  size_t coll_ce_chunk_bytes = 0;
  int coll_ce_lanes = 1;
  // Auto selection of the zero-copy path (CollAlgo::ZeroCopy) for all_gather, all_to_all and
  // broadcast whose recvbuf lies in a registered window: pieces of at least this many bytes
  // (PEERLINK_COLL_ZERO_COPY_MIN; 0 = never by auto). 2x H200, bf16, graph, push path / zero-copy
  // (32-block copy kernel): all_gather 4 MB pieces 19.8 / 19.9 us, 8 MB 34.9 / 32.1; all_to_all
  // alike; broadcast 8 MB 31.0 / 32.0, 16 MB 55.2 / 54.6, 32 MB 105.4 / 102.0.
  size_t coll_zero_copy_min = size_t(8) << 20;
  // How the zero-copy path moves its pushes (PEERLINK_COLL_ZERO_COPY_CE): 0 = a copy kernel on
  // every SM (allreduce_blocks / allreduce_threads override its grid) unless coll_zero_copy_ce_min
  // says copy engines, 1 = copy engines always, each push split over coll_ce_lanes streams.
  int coll_zero_copy_ce = 0;
  // With 2 ranks, zero-copy calls whose largest push has at least this many bytes take the copy
  // engines (PEERLINK_COLL_ZERO_COPY_CE_MIN; 0 = never by size). In-place all_to_all always keeps
  // the kernel (it swaps). 2x H200, nccl-tests -g 2 -G 100, out of place / in place, us: broadcast
  // 128 MB engines 364.9 / 356.3, kernel 373.8 / 375.7; 64 MB 194.9 / 189.1 against 190.8 / 192.0;
  // all_gather 256 MB (128 MB pushes) 375.2 / 364.1 against 378.4 / 379.9, 128 MB 202.5 / 193.3
  // against 194.8 / 194.6. A copy engine alone moves 394 GB/s one way at 256 MB, 384 both ways at
  // once; the kernel ~360.
  size_t coll_zero_copy_ce_min = size_t(128) << 20;

  // ---- stream-ordered send/recv on GPUs (src/stream/).
  // Most blocks one stream send/recv channel uses (PEERLINK_STREAM_BLOCKS, [0, 1024]); 0 = the
  // built-in default (64). The grid is capped at the multiprocessor count whatever the setting.
  int stream_blocks = 0;
  // Threads per block of the stream send/recv kernel (PEERLINK_STREAM_THREADS, 0 or a multiple of 32
  // in [32, 512]); 0 = by the launch's largest message (stream_launch.h: stream_threads_for). A
  // launch with an in-place zero-copy exchange always runs 512 (each block holds 2 x 32 KB in registers).
  int stream_threads = 0;
  // GPU messages up to this many bytes travel as LL lines (flag in every 16-byte line: no fence, no
  // ready flag), split over several blocks (one per 4 KB above 8 KB; NCCL form: one per 8 KB above
  // 128 KB); 0 = never (PEERLINK_STREAM_LL_MAX, [0, 512 KB], rounded up to 8). Every rank must agree
  // (the area layout follows it; its published-form LL ring takes 16 * (ll_max / 8 + 2) bytes x 8
  // slots per peer: 8 MB at 512 KB). 2x H200 (2026-11-23, scripts/gpu_stream_sweep.sh, published
  // one-way in a graph): 5.62 us at 128 KB and 6.29 at 256 KB with 256 KB against 8.43 / 8.87 with
  // 8 KB, the same below 16 KB. 512 KB: 2x H100, between processes, graph, 512 KB one way published /
  // NCCL form 7.75 / 10.0 us against 11.6 / 10.5 with 256 KB (non-LL), the same at 256 KB and 1 MB.
  size_t stream_ll_max = size_t(512) << 10;
  // GPU published-form sends of at least this many bytes are copied by the copy engine (a small
  // kernel waits for the posted recv, cudaMemcpyAsync on stream_ce_lanes lanes, a small kernel
  // publishes ready) when the call is not part of a group with other kinds of operations; 0 = never
  // (PEERLINK_STREAM_CE_MIN, [0, 2^40]). In that path a (buffer, offset, len) mismatch with the recv
  // is still reported, but the bytes land at the sender's range of the published buffer. 2x H100
  // (ping-pong in a graph, one way): one lane 695.8 us at 256 MB (385.8 GB/s) and 359.0 at 128 MB
  // against the kernel's 737.0 / 374.3; 64 MB 192.4 / 193.1 (a tie); the kernel ahead at 32 MB. A
  // copy engine alone moves 395 GB/s one way, SM kernels at most ~370 (push or pull, any grid).
  size_t stream_ce_min = size_t(128) << 20;
  // After a spin saw a peer's flag: 1 = one ld.acquire.sys of the flag, 0 = fence.acq_rel.sys
  // (PEERLINK_STREAM_ACQUIRE_LOAD=0|1; the same ordering; HIP: always the fence). 1 measured faster
  // on 2x H200 (2026-11-23, with PDL): 3.75 against 4.46 us one-way at 8 B, 3.79 / 4.39 at 512 B.
  bool stream_acquire_load = true;
  // Copy-engine lanes (forked streams) of that path (PEERLINK_STREAM_CE_LANES, [1, 4]). One: 256 MB
  // one way 695.8 us against 701.2 with 2 and 707.7 with 4 (2x H100).
  int stream_ce_lanes = 1;
  // NCCL-form messages of at least this many bytes (and above stream_ll_max) between two ranks of
  // one process (nccl-tests -g 2 / -t 2, one process driving several GPUs) go zero-copy: the
  // receiving kernel posts its buffer's address, the sender's blocks write straight into it (no
  // staging, no per-chunk flags, no copy-out). A recv buffer the peer's GPU cannot write (VMM or
  // memory-pool memory, another device) takes the staged path for that message. 0 = never
  // (PEERLINK_STREAM_DIRECT_MIN, [0, 2^40]). Every rank of the pair must agree (the area header
  // carries it). The sender waits for the receiver's post before it moves a byte, which costs more
  // than the copy-out it saves below ~16-24 MB with half-slot staged chunks: nccl-tests
  // sendrecv_perf -g 2 -G 100 through libnccl.so.2, out of place, us, zero-copy from 256 KB /
  // staged / real NCCL, 2x H100: 1 MB 17.21 / 13.04 / 15.82, 4 MB 28.11 / 22.41 / 25.48, 8 MB
  // 39.84 / 35.31 / 37.60, 16 MB 63.00 / 61.48 / 61.22, 24 MB 85.67 / 87.85, 32 MB 109.28 / 111.88 /
  // 109.99; 2x H200, out / in place: 16 MB zero-copy 58.4 / 59.4 against staged 60.0 / 62.7 (NCCL
  // 60.6 / 59.6-59.8), 8 MB 34.6 / 35.9 against 33.8 / 34.0 (NCCL 36.7 / 35.8).
  size_t stream_direct_min = size_t(16) << 20;
  // The same between two processes (PEERLINK_STREAM_DIRECT_IPC_MIN, [0, 2^40]; 0 = never): the
  // receiver exports its receive allocations to the sender, which maps them (src/transport/
  // stream_zc.h); a buffer's first messages are staged. Every rank must agree (the area header
  // carries it). Between processes the sender waits for the receiver's post before it moves a byte,
  // so small messages lose: 2x H100, graph, sendrecv / one-way us, zero-copy against staged: 1 MB
  // 16.2 / 14.6 against 13.2 / 13.0, 4 MB 25.4 / 23.9 against 22.4 / 22.0, 8 MB 37.0 / 35.3
  // against 35.4 / 34.9, 16 MB 60.4 / 57.9 against 63.0 / 62.8, 64 MB 199.7 / 198.8 against
  // 213.4 / 204.8, 256 MB 751.6 / 741.5 against 805.7 / 776.6.
  size_t stream_direct_ipc_min = size_t(16) << 20;

  // ---- the NCCL-compatible library (src/nccl/, libnccl.so.2); the rest of the library ignores them.
  // The real NCCL to forward to (PEERLINK_NCCL_LIBRARY: a path to libnccl.so.2); "" = the usual places.
  std::string nccl_library;
  // NCCL_DEBUG as NCCL spells it (VERSION, WARN, INFO, TRACE, ...; kept verbatim, never rejected: it is
  // NCCL's variable); the shim says which path each communicator and op took at INFO and TRACE.
  std::string nccl_debug;
  // ncclAllGather and ncclAlltoAll on a peerlink communicator move blocks of at least this many
  // bytes per peer as grouped send/recv (zero-copy between ranks of one process, the own block
  // copied by the same kernel) instead of the collective's staged push, unless both buffers lie in
  // registered windows (the collective's zero-copy path); 0 = always the collective
  // (PEERLINK_NCCL_P2P_PLAN_MIN, [0, 2^40]). 8 MB, from nccl-tests -g 2 through the shim on 2x
  // H200, send/recv against the collective, 2 ranks, total bytes: alltoall 4 MB 15.11 / 14.69 us,
  // 8 MB 20.90 / 21.81, 64 MB 104.75 / 141.33; all_gather 8 MB 20.87 / 19.98 out of place, 20.25 /
  // 18.92 in place, 32 MB 59.63 against 73.16. Between processes the NCCL form's sendrecv of 2 / 8
  // MB took 15.53 / 33.06 us against the all_to_all collective's 13.30 / 38.57 at 4 / 16 MB total.
  size_t nccl_p2p_plan_min = size_t(8) << 20;
  // PEERLINK_NCCL_HOST_BACKEND=1: libnccl.so.2's communicators use the host backend (device -1,
  // host pointers) whatever the current GPU, so that CI drives the NCCL C API without a GPU. A test
  // switch (not in docs/configuration.md); a field here rather than in test_hooks because
  // libnccl.so.2 reads it and sees the public API only.
  bool nccl_host_backend = false;

  // ---- multi-node (src/hier/, include/peerlink/multinode.h, docs/multi-node.md).
  // This rank's host identity (PEERLINK_HOSTID, else NCCL_HOSTID as NCCL reads it): ranks whose
  // strings are equal form one node; "" = the hostname up to its first '.' and the boot id, as
  // NCCL's host hash. A Communicator's ranks must share one node; a multi-node communicator runs
  // peerlink inside each node and an inter-node engine between them.
  std::string host_id;
  // Where the multi-node rendezvous listens (PEERLINK_SOCKET_IFNAME, else NCCL_SOCKET_IFNAME; NCCL's
  // syntax: comma-separated name prefixes, a leading '^' excludes them, a leading '=' asks for exact
  // names); "" = the first interface that is up and not loopback, else loopback.
  std::string socket_ifname;
  // Collectives of at least this many bytes (the full buffer) on a multi-node communicator with the
  // same number of ranks on every node run the two-level plan (peerlink inside each node, the
  // inter-node engine between nodes); others run whole on the engine (PEERLINK_HIER_MIN_BYTES,
  // [0, 2^50]; 0 = off: every collective whole on the engine). Off by default: the cost model in
  // docs/design-multinode.md finds NCCL's ring as fast or faster on nodes with a 400 Gb/s NIC per
  // GPU, and the plan up to 1.5x faster where fewer NICs serve a node; measure, then set it. Every
  // rank of a communicator must use the same value (the rendezvous checks it).
  size_t hier_min_bytes = 0;
  // Test hook (PEERLINK_TEST_HIER_REAL_ENGINE=1): a multi-node communicator of libnccl.so.2 on the
  // host backend asks for the real NCCL as its inter-node engine (which cannot serve host memory),
  // so CI reaches the paths where the real NCCL cannot be loaded.
  bool test_hier_real_engine = false;

  // Interruption hook (not from the environment; empty = never called, the waits run as before).
  // Called from the calling thread at least every ~50 ms while one of these blocks: the
  // constructor (rendezvous and setup), barrier(), wait_ipc_buffer(), isend()/send_direct()
  // waiting for a newer publication, and the host backend's allreduce. It may throw to abandon
  // the wait; the exception propagates unchanged, and a constructor first removes everything it
  // created. An abandoned publication wait can be retried. An abandoned barrier or collective
  // cannot: this rank has counted it and its peers may not have, so from then on barrier() and
  // collectives throw Error (point-to-point calls still work); close the communicator. Not called by
  // Request::wait() (wait(timeout) in slices instead) nor by send_direct()'s wait for completion,
  // which must not return while the copy may still read `src`. The Python package sets it to
  // check for signals, which makes Ctrl-C raise KeyboardInterrupt promptly. The same polls also
  // notice close() called on another thread: the wait then throws InvalidArgument ("closed")
  // before this hook runs (Communicator::close).
  std::function<void()> interrupt_check;

  // The library's own test switches (fault injection, coverage); internal, set by from_env from
  // their variables. Null = none. Copies of these Options share them (they are immutable).
  std::shared_ptr<const detail::TestHooks> test_hooks;

  // Reads every variable of the knob registry; unset (or empty) variables keep the defaults above,
  // then validate(). Throws InvalidArgument naming the variable and value when one cannot be parsed.
  // An NCCL variable read in place of an unset PEERLINK_* one is read as NCCL reads it: a value out
  // of range is clamped, text that is no value is ignored, so a program that runs on NCCL never
  // fails here.
  static Options from_env();
  // The one check of every field's range and spelling (a Communicator calls it on the Options it
  // is given, so values set in code are held to the same rules as the environment's). Throws
  // InvalidArgument naming the field, its variable and the value.
  void validate() const;
};

const char* to_string(Completion c);
const char* to_string(Path p);
const char* to_string(DescriptorPassing d);
const char* to_string(AllreduceAlgo a);
// "", "auto", "oneshot", "twoshot", "bandwidth", "zero_copy" (and the usual spellings), case-insensitive;
// InvalidArgument naming the string otherwise.
AllreduceAlgo parse_allreduce_algo(const std::string& s);
const char* to_string(CollAlgo a);
// "", "auto", "ll", "ll128", "push", "ce", "zero_copy", "two_hop" (and the usual spellings),
// case-insensitive; InvalidArgument naming the string otherwise.
CollAlgo parse_coll_algo(const std::string& s);

}  // namespace peerlink
