// Stream-ordered point-to-point (Communicator::send / recv / group_start / group_end): one engine per
// communicator, created on the first such call and kept as its UpperState (services.h: so it
// is destroyed before the transport closes).
//
// Protocol (both forms, per ordered pair, flags in the receiver's / sender's area: stream_layout.h):
//   published form  recv k: write PostDesc k into the sender's area, release-store pub_posted = k;
//                   send k: wait pub_posted >= k, compare the PostDesc with its own (buf_id, offset,
//                   len): equal -> copy into the published buffer; else write nothing. Then write
//                   ReadyDesc k (status) into the receiver's area and release-store pub_ready = k;
//                   recv k completes when pub_ready >= k (mismatch -> InvalidArgument on both sides).
//                   GPUs, len <= Options::stream_ll_max: the sender does not wait for the post; its
//                   blocks write header + data as LL lines into the receiver's ring slot
//                   k % kLLSlots (credit: pub_posted >= k + 1 - kLLSlots); the receiver, which still
//                   posts k and waits for pub_ready or the LL header, whichever comes, checks the
//                   header against its recv and copies the data into its buffer (stream_layout.h).
//                   GPUs, len >= Options::stream_ce_min, a batch of such sends only: the copy
//                   engine moves the bytes between a waiting and a publishing kernel (stream_ce.cpp).
//   NCCL form       chunks (Options-independent geometry, AreaHeader) through the receiver-owned
//                   staging slots of the pair: chunk g waits raw_consumed >= g + 1 - slots, copies,
//                   writes ChunkHdr, release-stores raw_ready = g + 1; the receiver copies chunk g out
//                   and release-stores raw_consumed = g + 1. A zero-byte message is one empty chunk.
//                   (GPUs: the same with one ready / consumed flag per slot, raw_slot_ready[g % slots]
//                   = g + 1, because several blocks move different chunks at once: stream_raw_device.h.
//                   A length mismatch stops the pair there instead of draining. A message of at most
//                   Options::stream_ll_max bytes is chunks of stream::ll_piece(len) bytes sent as LL lines
//                   into their slots' LL areas: no fence, no ready flag; the receiver waits for the
//                   flag or the lines, whichever. Between two ranks of one process, a message of at
//                   least Options::stream_direct_min bytes goes zero-copy when the recv buffer is
//                   within the sender GPU's reach: the receiver posts its address, the sender writes
//                   straight into it: stream_direct_device.h. Between processes the same from
//                   Options::stream_direct_ipc_min, into receive allocations exported to the
//                   sender and acknowledged by it: stream_zc.h.)
// The two forms are separate FIFO channels (a published-form send is matched only by a
// published-form recv), and both are separate from the host-driven isend/irecv channel: mixing
// them on one pair is allowed and each channel keeps its own order. (They share no counters, so
// nothing can be mismatched across channels; the caller orders them with its streams.)
//
// Host backend: every call runs synchronously on the calling thread (stream ignored). A group
// queues its operations and group_end progresses all of them together (non-blocking state
// machine), so any pattern whose every rank issues its part inside one group completes.
// Groups are per communicator (not per thread): group_start on one thread collects the calls of
// every thread of the communicator until group_end. Nested group_start and group_end without
// group_start are InvalidArgument (they are bugs in the caller's pairing, not something to count).
// GPUs: one kernel per (batch, stream) (stream_launch.h); nothing host-side waits, allocates or
// queries events while the stream is being captured, but the first call with a peer (it maps the
// peer's area and reads its header) and the first send to a newly published buffer version (it
// maps that buffer) must be made outside a capture, as an eager warm-up call. A channel's
// counters are read when its kernel starts: calls of one (peer, direction, form) issued on several
// streams must be ordered by the caller (events), as NCCL requires for one communicator. On GPUs a
// published-form mismatch is reported on the receiver only (the sending kernel cannot throw).
// NCCL form to this rank itself (as NCCL allows): only inside a group, where group_end matches the
// self sends with the self recvs FIFO (lengths equal, the same stream) and the batch's kernel copies
// them beside the other channels (the host backend: memcpy); unmatched ones are InvalidArgument.
// Bad input is rejected when the call is made (InvalidArgument, nothing queued or written); a
// failure while moving data (timeout, peer lost, protocol violation) breaks the channels of the
// peers involved: later calls with them rethrow that error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "gpu/owners.h"
#include "stream/stream_layout.h"
#include "transport/services.h"

namespace peerlink::stream {
struct StreamLaunch;
}

namespace peerlink::detail {

class CommServices;
class StreamZeroCopy;

// LocalCopy: an NCCL-form send to this rank itself matched with its recv in one group
// (stream_launch.h kChLocalCopy: the batch kernel's blocks copy it beside the other channels).
enum class StreamOpKind : int { SendPub = 0, RecvPub = 1, SendRaw = 2, RecvRaw = 3, LocalCopy = 6 };

struct StreamOp {
  StreamOpKind kind = StreamOpKind::SendPub;
  int peer = -1;
  const char* src = nullptr;  // sends
  char* dst = nullptr;        // SendPub: mapped destination in the published buffer; RecvRaw: user buffer;
                              // RecvPub: this rank's published buffer at offset (LL copy-out)
  size_t len = 0;
  uint32_t buf_id = 0;        // published form
  size_t offset = 0;
  uint64_t version = 0;
  void* stream = nullptr;
  std::shared_ptr<void> hold;  // SendPub: keeps the destination mapping open

  // Host progress (stream_host.cpp).
  uint64_t seq = 0;          // 1-based message number in its channel
  uint64_t first_chunk = 0;  // NCCL form: global (0-based) number of its first chunk
  uint64_t nchunks = 0;
  uint64_t chunks_done = 0;
  uint64_t msg_len = 0;      // RecvRaw: the sender's length (differs from len on a mismatch: drained)
  bool drain = false;        // RecvRaw on a length mismatch: consume the chunks, write nothing
  bool posted = false;
  bool done = false;
  bool direct_ok = false;    // GPU RecvRaw, zero-copy candidate: the peer's GPU may write dst (stream_direct_device.h)
  int zc_slot = -1;          // GPU RecvRaw from another process: dst's zero-copy slot (offset: into it; stream_zc.h)
  std::exception_ptr error;  // a mismatch, reported after the whole batch moved
};

class StreamEngine final : public UpperState {
 public:
  explicit StreamEngine(CommServices& comm);
  ~StreamEngine() override;
  StreamEngine(const StreamEngine&) = delete;
  StreamEngine& operator=(const StreamEngine&) = delete;

  void send_pub(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset, uint64_t version,
                void* stream);
  void recv_pub(int peer, uint32_t buf_id, size_t offset, size_t len, void* stream);
  void send_raw(int peer, const void* src, size_t len, void* stream);
  void recv_raw(int peer, void* dst, size_t len, void* stream);
  void group_start();
  void group_end();

  // Throws what a kernel of this engine recorded (timeout, lost peer, stopped pair) and no later
  // call cleared; returns when nothing is pending. Reads only, so another thread may call it
  // beside the owner's calls (NCCL's ncclCommGetAsyncError from a watchdog); the owner's next call
  // still reports the error itself and marks the pair broken.
  void rethrow_async_error() const;

  // Tests: zero-copy slots of peer that this rank's recvs found acknowledged (stream_zc.h).
  int zero_copy_slots_seen(int peer) const;

  size_t chunk_bytes() const { return chunk_; }
  size_t slots() const { return slots_; }

 private:
  // Argument checks (stream_args.cpp): everything this rank can check alone, before any setup that
  // needs the peer. check_recv_pub returns the base of this rank's publication.
  void check_peer_usable(int peer, const char* what);  // range, not itself, a direct pair (GPUs)
  void check_send_pub(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset, uint64_t version);
  char* check_recv_pub(int peer, uint32_t buf_id, size_t offset, size_t len);
  void check_raw(int peer, const void* buf, size_t len, bool send);
  void check_pair(int peer, bool alive = true);  // device errors, broken channels, liveness
  void bind_peer(int peer);
  void submit(StreamOp op);
  void run(std::vector<StreamOp>& ops);
  void run_host(std::vector<StreamOp>& ops);   // stream_host.cpp
  void run_gpu(std::vector<StreamOp>& ops);    // stream_gpu.cpp: one kernel per stream, no host wait
  // Host backend steps (stream_host.cpp). A FIFO channel's state in one pass over the batch: its
  // earlier ops all done (Open), one of them stuck (Blocked), or a published recv posted, not done.
  enum class HostChannel : char { Open = 0, Blocked, Posted };
  void number_host_ops(std::vector<StreamOp>& ops);
  bool host_recv_pub(StreamOp& op, HostChannel& blk);  // each: whether it moved; op.done when finished
  bool host_send_pub(StreamOp& op, HostChannel& blk);
  bool host_send_raw(StreamOp& op, HostChannel& blk);
  bool host_recv_raw(std::vector<StreamOp>& ops, StreamOp& op, HostChannel& blk);
  void drain_host_recv(std::vector<StreamOp>& ops, StreamOp& op, uint64_t sender_len);
  // GPU steps (stream_gpu.cpp): one launch per stream of the batch.
  struct GpuLaunch;
  void plan_launch(const std::vector<StreamOp>& ops, void* stream, GpuLaunch& b) const;
  void add_channels(stream::StreamLaunch& L, const std::vector<const StreamOp*>& mine,
                    std::vector<std::shared_ptr<void>>& holds) const;
  int fill_zero_copy(std::vector<GpuLaunch>& batch, bool capturing) const;
  void enqueue_launch(GpuLaunch& b, bool binds);
  void check_device_error();                   // stream_gpu.cpp: what earlier kernels recorded
  std::exception_ptr device_error(uint32_t word) const;  // stream_gpu.cpp: the error a word names
  void reap_inflight(bool wait_all);
  void assign_blocks(stream::StreamLaunch& L) const;  // stream_gpu.cpp: grid of one launch
  int channel_blocks_wanted(const stream::StreamLaunch& L, int c) const;  // before the grid budget
  bool ce_eligible(const std::vector<const StreamOp*>& ops) const;  // stream_ce.cpp
  void launch_ce(const stream::StreamLaunch& L, void* stream);      // stream_ce.cpp
  void mark_broken(const std::vector<StreamOp>& ops, std::exception_ptr e);

  stream::PairSection* mine(int q) const { return stream::section(area_, q, sec_bytes_); }

  CommServices& comm_;
  int rank_ = 0;
  int world_ = 0;
  bool host_ = true;
  size_t slots_ = 0;
  size_t chunk_ = 0;
  size_t sec_bytes_ = 0;
  size_t area_len_ = 0;
  void* area_ = nullptr;                           // this rank's area
  std::vector<stream::PairSection*> remote_;       // [q]: section `rank_` of q's area, mapped here
  std::vector<std::shared_ptr<void>> remote_hold_;
  std::vector<uint64_t> pub_completed_;            // [q]: published-form recvs from q completed
  std::vector<std::exception_ptr> broken_;         // [q]: the error that broke the pair's channels

  // GPU only.
  uint32_t* error_ = nullptr;  // host-mapped error word the kernels write (stream_launch.h)
  int grid_cap_ = 1;           // most blocks of one launch: the device's multiprocessor count
  int channel_blocks_ = 1;     // most blocks of one channel (Options::stream_blocks or kMaxChannelBlocks)
  bool pdl_ = false;           // launch with programmatic dependent launch (Options::stream_pdl)
  size_t ll_max_ = 0;          // Options::stream_ll_max rounded up to 8 (GPU; 0 on the host backend)
  size_t ce_min_ = 0;          // Options::stream_ce_min (0: no copy-engine path)
  size_t direct_min_ = 0;      // Options::stream_direct_min (GPU; 0 on the host backend)
  size_t direct_ipc_min_ = 0;  // Options::stream_direct_ipc_min (GPU; 0 on the host backend)
  std::vector<char> in_process_;  // [q]: q is a rank of this process (its area mapped by pointer)
  // Ranks of this process on this rank's GPU (this one included): their launches must all be
  // resident at once (a process does not time-slice its own kernels), so each gets a share of the
  // multiprocessors (assign_blocks).
  int gpu_sharers_ = 1;
  std::unique_ptr<StreamZeroCopy> zc_;  // NCCL-form zero-copy between processes (GPU, stream_direct_ipc_min > 0)
  std::vector<gpu::StreamOwner> ce_lanes_;  // side streams of the copy-engine path (lanes - 1)
  std::vector<gpu::EventOwner> ce_events_;  // [0] fork, [1 + l] join of side lane l
  struct Inflight {
    void* event = nullptr;  // recorded after the launch (eager launches only)
    std::vector<std::shared_ptr<void>> holds;
  };
  std::vector<Inflight> inflight_;
  std::vector<void*> free_events_;
  std::vector<std::shared_ptr<void>> graph_holds_;  // mappings a captured launch writes: kept for good

  std::recursive_mutex mu_;  // one batch at a time; guards the group and the counters
  bool in_group_ = false;
  std::vector<StreamOp> group_;
  std::vector<StreamOp> self_sends_, self_recvs_;  // NCCL form to this rank, matched at group_end
  void queue_self(StreamOp op);
  void match_self(std::vector<StreamOp>& ops);
};

// The communicator's engine, created (and its area published to every peer) on first use.
StreamEngine& stream_engine(CommServices& comm);
// StreamEngine::rethrow_async_error of comm's engine, if it has one (none is created).
void stream_rethrow_async_error(CommServices& comm);

}  // namespace peerlink::detail
