// One communicator per process: meets the other ranks of `unique_id` on this node through POSIX SHM
// (any start order), then moves bytes between their buffers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "peerlink/options.h"
#include "peerlink/request.h"

namespace peerlink {

class Communicator;
namespace detail {
class CommImpl;
class CommServices;
// Internal (src/transport/services.h); declared here only to befriend it. Not exported.
CommServices& services(Communicator& comm);
}  // namespace detail

// Counters for tests and diagnostics (IPC cache behaviour, which paths carried traffic).
struct CommStats {
  uint64_t exports = 0;       // allocations exported (once per allocation)
  uint64_t opens = 0;         // peer allocations mapped (once per peer allocation)
  uint64_t closes = 0;        // mappings closed
  uint64_t exports_fd = 0;    // of the exports, by file descriptor (VMM on GPUs, memfd on host)
  uint64_t opens_fd = 0;      // of the opens, by file descriptor
  uint64_t sends_done_seq = 0;
  uint64_t sends_ring = 0;
  uint64_t sends_relay = 0;
};

// A fresh unique id for a Communicator, made on this node: it carries this rank's host identity
// (Options::host_id, else hostname + boot id), so a rank on another node that is handed it fails
// at once (InvalidArgument naming both hosts) instead of waiting for the rendezvous to time out.
// Any other string still works as an id (without that check).
std::string make_unique_id(const Options& opts = Options::from_env());

class Communicator {
 public:
  // Collective: every rank of the job must construct its communicator (any order, within timeout).
  Communicator(std::string unique_id, int rank, int world_size, int device,
               Options opts = Options::from_env());
  ~Communicator();  // clean teardown: joins workers, closes mappings, unlinks what it created
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int world_size() const;
  int device() const;  // kHostDevice (-1) for the host-memory backend
  const Options& options() const;
  const std::string& unique_id() const;

  // Exportable memory of this communicator's device (POSIX SHM on the host backend).
  void* alloc(size_t bytes);
  void free(void* p);

  // Receiver: publish [ptr, ptr+len) as buffer `buf_id` for `peer` at `version` (> 0).
  // Publishing the same (ptr, len, version) again writes nothing.
  void notify_ipc_buffer(int peer, uint32_t buf_id, void* ptr, size_t len, uint64_t version);
  // Sender: wait until `peer` published `buf_id` at >= min_version, and open the mapping ahead.
  void wait_ipc_buffer(int peer, uint32_t buf_id, uint64_t min_version);

  // version > 0: direct (or relay) path into the published buffer at `offset`; version must equal
  // the published one. version == 0: per-message handshake with the peer's matching irecv.
  Request isend(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset,
                uint64_t version);
  // isend + wait. Waits run Options::interrupt_check and notice close() on another thread; on any
  // failure (timeout, lost peer, interruption) the message is given up before the error returns:
  // the call never reads `src` again once it returned.
  void send_direct(int peer, const void* src, size_t len, uint32_t buf_id, uint64_t version,
                   size_t offset = 0);
  // The same with its own bound instead of Options::timeout (the Python binding's `timeout`).
  void send_direct(int peer, const void* src, size_t len, uint32_t buf_id, uint64_t version,
                   size_t offset, std::chrono::milliseconds timeout);
  // Completes when the next matching send from `peer` has landed in [buf_id + offset, +len).
  Request irecv(int peer, uint32_t buf_id, size_t offset, size_t len);

  // Stream-ordered point-to-point, enqueued on `stream` (cudaStream_t / hipStream_t as void*;
  // nullptr = the default stream): no host synchronization, capturable in a graph (every replay
  // moves the data again, in order). Host backend: synchronous, stream ignored. Matching is FIFO
  // per (sender, receiver) pair and form; each form is its own channel, separate from isend/irecv.
  // Published-buffer form (no handshake): lands in the peer's buffer `buf_id` published at `version`.
  void send(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset, uint64_t version,
            void* stream);
  void recv(int peer, uint32_t buf_id, size_t offset, size_t len, void* stream);
  // NCCL form: any buffers of this device; the library stages the bytes (buffer ids >= 0xFFFFFF00
  // are reserved for it), or writes large messages straight into the recv buffer: between two ranks
  // of one process from Options::stream_direct_min, between processes from
  // Options::stream_direct_ipc_min once the sender mapped the recv buffer's allocation (the library
  // exports it; a buffer's first messages, and buffers first used inside a capture, are staged). `peer` may be this rank itself inside a group (as
  // NCCL allows): each such send is matched FIFO with such a recv of the same group, same length and
  // stream, and copied by the group's kernel; unmatched ones are InvalidArgument at group_end.
  void send(int peer, const void* src, size_t len, void* stream);
  void recv(int peer, void* dst, size_t len, void* stream);
  // Calls between group_start and group_end are issued together at group_end, so any pattern of
  // sends and receives (ring, all pairs) cannot deadlock. Groups do not nest (InvalidArgument).
  void group_start();
  void group_end();
  // Throws the error that stream-ordered send/recv recorded on the device (TimeoutError,
  // PeerLostError, Error for a pair stopped by the peer) and that is still pending; returns when
  // there is none. Reads only: it may run on another thread beside any call (a watchdog, as
  // NCCL's ncclCommGetAsyncError), and the next send/recv with that peer still throws it too.
  void check_async_error();

  void barrier();
  // Collective, small: gathers `bytes` (<= kMaxAllgatherBytes) from every rank into
  // all[rank * bytes] (host memory). For control data such as a benchmark's per-rank results.
  static constexpr size_t kMaxAllgatherBytes = 1024;
  void allgather_bytes(const void* mine, size_t bytes, void* all);

  // Explicit teardown (the destructor calls it). Thread rule: close() may run while other threads
  // are inside calls of this communicator. It marks the communicator closed (every later call
  // throws InvalidArgument "closed"), wakes the calls blocked in a wait (barrier, wait_ipc_buffer,
  // a send waiting for a publication, the host allreduce: they throw InvalidArgument "closed"
  // within ~20 ms), waits for every call in flight to return (bounded by Options::timeout), and
  // only then frees the transport; pending requests fail with InvalidArgument. Destroying the
  // Communicator object itself while another thread still uses it remains the caller's error.
  void close();
  bool closed() const;

  // What the pair (this rank, peer) uses after setup: for tests, logs and benchmarks.
  Path path_to(int peer) const;
  Completion completion_with(int peer) const;
  // The peer's rank runs in this process (several GPUs driven by one process, as nccl-tests -g 2
  // does): a hint from the rendezvous, for choosing among equally correct paths.
  bool shares_process(int peer) const;
  CommStats stats() const;

 private:
  // Layers above the transport reach it through this (src/transport/services.h), not exported.
  friend detail::CommServices& detail::services(Communicator& comm);
  std::unique_ptr<detail::CommImpl> impl_;
};

}  // namespace peerlink
