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
// Layout: the engine (this file; stream_p2p.cpp setup and calls, stream_args.cpp checks,
// stream_group.cpp groups) is the same for both backends and never tests which one it runs on; what
// differs sits behind StreamRunner (stream_runner.h): the host runner (stream_host.cpp) and the GPU
// runner (stream_gpu_runner.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "stream/stream_runner.h"
#include "transport/services.h"

namespace peerlink::detail {

class CommServices;

// The calls, their checks, groups and self pairs; data movement and device state belong to the
// runner of the communicator's backend (stream_runner.h).
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

  size_t chunk_bytes() const { return state_.chunk; }
  size_t slots() const { return state_.slots; }

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
  void mark_broken(const std::vector<StreamOp>& ops, std::exception_ptr e);

  StreamState state_;
  std::unique_ptr<StreamRunner> runner_;  // of the communicator's backend (stream_runner.h)

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
