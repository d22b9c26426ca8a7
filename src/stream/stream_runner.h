// What the stream engine (stream_p2p.h) hands to a backend, and the one interface both backends
// implement. The engine owns the calls, their checks, groups, self pairs and the per-peer broken
// state; a runner owns what differs between the host backend and GPUs: the area's geometry and
// initialization, moving a batch of ops, device errors recorded by earlier launches, and work still
// in flight at close. Host runner: stream_host.cpp (synchronous, on the calling thread). GPU
// runner: stream_gpu_runner.h (stream-ordered kernels and copy engines, nothing host-side waits).
#pragma once
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "stream/stream_layout.h"

namespace peerlink::detail {

class CommServices;

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

// The engine's state that its runner reads and advances: geometry (set by the runner's
// constructor, checked against every peer's AreaHeader), this rank's area, the peers' sections and
// the per-pair progress and failures.
struct StreamState {
  explicit StreamState(CommServices& c) : comm(c) {}

  CommServices& comm;
  int rank = 0;
  int world = 0;
  size_t slots = 0;
  size_t chunk = 0;
  size_t sec_bytes = 0;
  size_t area_len = 0;
  size_t ll_max = 0;          // Options::stream_ll_max rounded up to 8 (GPU; 0 on the host backend)
  size_t direct_min = 0;      // Options::stream_direct_min (GPU; 0 on the host backend)
  size_t direct_ipc_min = 0;  // Options::stream_direct_ipc_min (GPU; 0 on the host backend)
  void* area = nullptr;                            // this rank's area
  std::vector<stream::PairSection*> remote;        // [q]: section `rank` of q's area, mapped here
  std::vector<std::shared_ptr<void>> remote_hold;
  std::vector<char> in_process;                    // [q]: q is a rank of this process (its area mapped by pointer)
  std::vector<uint64_t> pub_completed;             // [q]: published-form recvs from q completed
  std::vector<std::exception_ptr> broken;          // [q]: the error that broke the pair's channels

  stream::PairSection* mine(int q) const { return stream::section(area, q, sec_bytes); }
};

class StreamRunner {
 public:
  virtual ~StreamRunner() = default;

  // Setup. init_area: this rank's zeroed area with header h at its start, complete before any
  // peer can learn its handle.
  virtual void init_area(const stream::AreaHeader& h) = 0;
  // Peer q's area was just mapped at `base` (its section for this rank: StreamState::remote[q]).
  virtual void peer_bound(int q, void* base, bool in_process) = 0;

  // Checks made when a call is made (InvalidArgument / UnsupportedError, nothing queued).
  virtual void check_peer_path(int peer, const char* what) const = 0;
  virtual void check_buffer(const void* p, size_t len, const char* what, int peer) const = 0;
  // Whether a recv reports a lost peer at once (else only when its wait finds nothing to take).
  virtual bool recv_needs_live_peer() const = 0;

  // An NCCL-form op with another rank, checked and its peer bound, before it is queued.
  virtual void prepare_raw(StreamOp& op) = 0;
  // A group's send to this rank itself matched with its recv: copied now, or queued into ops.
  virtual void add_self_copy(std::vector<StreamOp>& ops, const StreamOp& send, const StreamOp& recv) = 0;
  // Moves a batch (one call, or a whole group). Throws a mismatch (InvalidArgument) after the
  // batch completed; any other error leaves the ops not done where it stopped.
  virtual void run(std::vector<StreamOp>& ops) = 0;

  // The owner's calls: throws what earlier launches recorded (and marks the pair broken).
  virtual void check_device_error() = 0;
  // Any thread: throws what earlier launches recorded and no call cleared; reads only.
  virtual void rethrow_async_error() const = 0;
  // Before the area is freed: waits (bounded) for launches still in flight and drops the mappings
  // of the peers' memory that they write. Never throws.
  virtual void close() noexcept = 0;

  // Tests: zero-copy slots of peer that this rank's recvs found acknowledged (stream_zc.h).
  virtual int zero_copy_slots_seen(int peer) const = 0;
};

// Each sets the geometry in `state` (rank and world already there).
std::unique_ptr<StreamRunner> make_host_stream_runner(StreamState& state);  // stream_host.cpp
std::unique_ptr<StreamRunner> make_gpu_stream_runner(StreamState& state);   // stream_gpu.cpp

}  // namespace peerlink::detail
