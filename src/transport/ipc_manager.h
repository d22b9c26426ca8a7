// IPC manager: exports each local allocation once (cached by allocation, so slices reuse it),
// maps each peer allocation once (refcounted), binds (peer, buffer id) to the published version
// and releases the old mapping when a newer version replaces it. Mappings still used by an
// in-flight copy stay open until that copy completes (the op holds a reference).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "common/proc.h"
#include "gpu/backend.h"
#include "transport/registry.h"

namespace peerlink::detail {

struct IpcCounters {
  std::atomic<uint64_t> exports{0}, opens{0}, closes{0};
  // Of those, the ones by file descriptor (VMM chunks on GPUs, memfd chunks on the host backend).
  std::atomic<uint64_t> exports_fd{0}, opens_fd{0};
};

// One mapped peer allocation. Closing happens in the destructor, when the last user lets go.
class Mapping {
 public:
  Mapping(gpu::Backend& be, IpcCounters& ctr, const gpu::MemHandle& h, char* base, bool owned)
      : be_(be), ctr_(ctr), handle_(h), base_(base), owned_(owned) {}
  ~Mapping();
  char* base() const { return base_; }
  const gpu::MemHandle& handle() const { return handle_; }
  // The exporter is a rank of this process (verified against this process's exports, not taken
  // from the handle): its memory is used by pointer.
  bool in_process() const { return !owned_; }

 private:
  gpu::Backend& be_;
  IpcCounters& ctr_;
  gpu::MemHandle handle_;
  char* base_;
  bool owned_;  // false in-process: the pointer belongs to the exporter
};

struct Binding {
  uint64_t version = 0;
  uint64_t offset = 0;  // of the buffer inside its allocation
  char* ptr = nullptr;  // start of the published buffer in this process
  uint64_t len = 0;
  std::shared_ptr<Mapping> map;
};

// Handles come from peers through shared memory and are untrusted: a handle is mapped only as an
// allocation of the peer that sent it. One whose owner is this process (ranks sharing a process)
// is used as a raw pointer only when it names an allocation some IpcManager of this process really
// exported (process-wide table: base, allocation id, size and kind must all match), not one of
// this manager's own, and, when ranks are known, one exported by that very peer. Anything else is
// rejected with Error before any byte moves. The backend checks what it can of the rest (host: the
// segment name must be one of that peer's allocations).
class IpcManager {
 public:
  // `rank`: this manager's rank (-1 in tests that do not care); recorded with its exports.
  IpcManager(gpu::Backend& be, common::ProcId self, int rank = -1) : be_(be), self_(self), rank_(rank) {}
  ~IpcManager() { close_all(); }

  // Exports the allocation holding [p, p+len) once; *offset = p - allocation base.
  gpu::MemHandle export_range(const void* p, size_t len, uint64_t* offset);

  // The binding of (peer, buf_id) for `pub`: reused when the cached one was made from the same
  // record (version, offset, len and allocation), else the old one is released (closed once
  // unused) and the new allocation mapped. The returned pointer is always the mapping's base plus
  // pub.offset: the record the caller bounds-checked is the record it writes through.
  Binding bind(int peer, const Publication& pub);
  // Drops the export of the allocation at `base` (it is being freed).
  void forget_export(const void* base);

  // Upper layers (collectives): refcounted open/release by handle.
  void* acquire(int peer, const gpu::MemHandle& h);
  void release(int peer, const gpu::MemHandle& h);

  void close_all();
  IpcCounters& counters() { return ctr_; }

 private:
  using AllocKey = std::tuple<int, int32_t, uint64_t, uint64_t>;  // peer, owner pid, owner start, alloc id
  static AllocKey key_of(int peer, const gpu::MemHandle& h) {
    return AllocKey{peer, h.owner_pid, h.owner_start, h.alloc_id};
  }
  // Maps a peer allocation once; in-process handles return the exporter's pointer directly
  // (CUDA refuses to open a handle in the process that exported it).
  std::shared_ptr<Mapping> open_locked(int peer, const gpu::MemHandle& h);

  // The exporter's pointer for an in-process handle, after the checks above; throws Error.
  char* in_process_base(int peer, const gpu::MemHandle& h) const;
  void unregister_exports_locked();

  gpu::Backend& be_;
  common::ProcId self_;
  int rank_;
  IpcCounters ctr_;
  std::mutex mu_;
  struct Exported {
    gpu::MemHandle handle;
    char* base;
    uint64_t bytes;
  };
  std::map<char*, Exported> exports_;                       // by allocation base
  std::map<AllocKey, std::weak_ptr<Mapping>> mappings_;     // open peer allocations
  std::map<std::pair<int, uint32_t>, Binding> bindings_;    // (peer, buf_id)
  std::map<AllocKey, std::pair<std::shared_ptr<Mapping>, int>> acquired_;  // upper-layer refs
};

}  // namespace peerlink::detail
