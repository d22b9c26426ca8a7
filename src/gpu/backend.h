// Memory backends: where exportable memory comes from, how it is shared with another process, and
// how bytes are copied. Two siblings implement one interface: DeviceBackend (CUDA/HIP through the
// shim in runtime.h) and HostBackend (POSIX SHM + memcpy), so everything above is backend-agnostic.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <vector>

#include "common/fd_pass.h"
#include "gpu/runtime.h"
#include "peerlink/log_level.h"

namespace peerlink::gpu {

// HostShm / DeviceIpc: by name (segment name, legacy runtime IPC handle). HostFd / DeviceVmm: by file
// descriptor (memfd chunks / cuMemExportToShareableHandle chunks), data holds an FdHandleData
// (fd_export.h) and the importer fetches the descriptors from owner_pid (pidfd_getfd or socket).
enum class HandleKind : uint32_t { None = 0, HostShm = 1, DeviceIpc = 2, HostFd = 3, DeviceVmm = 4 };
inline bool is_fd_handle(HandleKind k) { return k == HandleKind::HostFd || k == HandleKind::DeviceVmm; }

// What travels through SHM to let a peer map an allocation. Plain data: readers must validate.
struct MemHandle {
  HandleKind kind = HandleKind::None;
  int32_t owner_pid = 0;
  uint64_t owner_start = 0;   // owner's start time (same-process detection, liveness)
  uint64_t alloc_id = 0;      // unique per allocation within the owner process
  uint64_t alloc_bytes = 0;   // size of the whole allocation
  uint64_t owner_base = 0;    // base address in the owner process
  unsigned char data[64] = {};  // HostShm: NUL-terminated segment name; DeviceIpc: runtime handle
};

struct AllocRange {
  char* base = nullptr;
  size_t bytes = 0;
  uint64_t alloc_id = 0;
};

// An ordered queue of copies (a stream on GPUs). Tickets complete in order. Every method may run
// on any thread: each takes a DeviceGuard (one cuCtxGetCurrent, 7.7 ns, when the thread is already
// on the queue's device, as the workers bound with Backend::bind_worker_thread() are).
class CopyQueue {
 public:
  virtual ~CopyQueue() = default;
  // Enqueues dst <- src; striped over the queue's lanes when `stripe` is set. Returns a ticket.
  // track == false: no completion ticket (0) is recorded; the caller learns completion otherwise
  // (signal_after), which saves an event record and the polling of it.
  virtual uint64_t copy(void* dst, const void* src, size_t bytes, bool stripe, bool track = true) = 0;
  virtual bool done(uint64_t ticket) = 0;  // throws on a device error
  // Stream-ordered store of `value` to `host_addr` (pinned host memory) once every copy enqueued
  // so far has landed. False when the backend cannot (host: the caller stores from the CPU).
  virtual bool signal_after(uint64_t* host_addr, uint64_t value) { return false; }
  // A small copy whose completion store comes from the copying kernel itself (no copy engine).
  // False when the backend cannot; then use copy() + signal_after().
  virtual bool copy_and_signal(void* dst, const void* src, size_t bytes, uint64_t* host_addr, uint64_t value) {
    return false;
  }
  // copy_and_signal of up to this many bytes runs on a kernel launched ahead of the message
  // (gpu/armed_lane.h), faster than a copy engine; 0 when the queue has none.
  virtual size_t armed_max() const { return 0; }
  // The transport has nothing in flight on this queue: cancel a kernel armed for a next send once it
  // waited for its window (always when `sleeping`: the caller is about to sleep).
  virtual void idle(bool sleeping) {}
  virtual void wait_all() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual bool is_host() const = 0;
  virtual int device() const = 0;
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* p) = 0;  // InvalidArgument when p is not from alloc()
  // The allocation that contains [p, p+len). InvalidArgument when there is none (host memory not
  // from alloc on the host backend), UnsupportedError when it exists but cannot be exported.
  virtual AllocRange find_allocation(const void* p, size_t len) = 0;
  virtual MemHandle export_allocation(const AllocRange& r) = 0;
  // Maps a peer's allocation; returns its base in this process.
  virtual void* open(const MemHandle& h) = 0;
  // open() of a handle received from rank `owner_rank`: a backend whose handles name their owner
  // (host: the segment name carries the rank) refuses one that names any other rank.
  virtual void* open_from(const MemHandle& h, int owner_rank) { return open(h); }
  virtual void close(const MemHandle& h, void* base) = 0;
  // A new copy queue with `lanes` parallel lanes (streams) for striping large copies.
  virtual std::unique_ptr<CopyQueue> make_queue(int lanes) = 0;
  // Pins host memory shared with peers (relay staging) for fast device copies; no-op on host.
  virtual void pin(void* p, size_t bytes) = 0;
  virtual void unpin(void* p) = 0;
  // Synchronous copy (tests, setup, host reference paths).
  virtual void copy_sync(void* dst, const void* src, size_t bytes) = 0;
  // Makes this backend's device current on the calling thread for good: for threads the library
  // owns and that never run user code (the transport's workers), once when they start. Every
  // other entry point sets and restores the device itself (gpu::DeviceGuard). No-op on host.
  virtual void bind_worker_thread() {}
  // The pids of the job's other ranks: the only processes allowed to fetch this process's exported
  // descriptors from its socket, and the only owners whose descriptors open() fetches.
  // The job's processes by rank (0 for this rank): descriptor handles are accepted from these only,
  // and a handle sent by rank r must name rank r's process.
  virtual void set_peer_pids(const std::vector<int32_t>& pids_by_rank) {}
  // `base` is memory of another communicator of this process (used by pointer, not IPC-opened):
  // make it reachable from this backend's kernels (peer access between two GPUs). No-op on host.
  virtual void share_in_process(void* base) {}
};

// Backend settings the transport passes down from Options.
struct BackendOptions {
  std::string job_prefix;        // names the descriptor socket (common/fd_pass.h)
  bool host_fd = false;          // host backend: alloc() makes memfd chunks exported by descriptor
  size_t host_chunk_bytes = 0;   // host fd memory: bytes per chunk (0: one chunk per allocation)
  common::FdPassing fd_passing = common::FdPassing::Auto;
  int timeout_ms = 60000;        // bound of a descriptor request
  LogLevel log_level = LogLevel::Warn;
  int arm_window_us = 0;         // GPU copy queues: small signalled sends armed ahead (armed_lane.h)
};

// device == -1: host backend with segments named `shm_prefix` + "m<n>"; else the GPU `device`.
std::unique_ptr<Backend> make_backend(int device, const std::string& shm_prefix, const BackendOptions& opts = {});

}  // namespace peerlink::gpu
