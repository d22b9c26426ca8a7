// VMM memory (cuMemCreate + cuMemMap; PyTorch expandable segments) shared by file descriptor: the
// exporter's chunk lists (one allocation id per distinct list, so a chunk freed and re-created at
// the same address is a new allocation for every peer), their export through FdExports, and the
// importer's mappings (the peer's chunks imported and mapped back to back in one reserved range).
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "gpu/backend.h"
#include "gpu/chunks.h"
#include "gpu/fd_export.h"

namespace peerlink::gpu {

class VmmShare {
 public:
  VmmShare(int dev, const BackendOptions& o);
  ~VmmShare();  // unmaps what open() mapped and is still open
  VmmShare(const VmmShare&) = delete;
  VmmShare& operator=(const VmmShare&) = delete;

  // The chunks behind [p, p+len) as one range (first chunk's base to last chunk's end).
  AllocRange find(const void* p, size_t len);
  // Exports `r` when find() made it (false: not VMM memory of ours). UnsupportedError naming the
  // range when the allocation has no POSIX-fd handle type.
  bool export_range(const AllocRange& r, MemHandle* h);
  void* open(const MemHandle& h);
  void close(void* base);
  void set_peer_pids(const std::vector<int32_t>& pids);

 private:
  // One reference to each chunk's allocation handle, held while an export names the chunk by the
  // handle's value: released, the value may be given to the next allocation at the same address,
  // which then looks like the old chunk (the suspected cause of a stale write after a freed
  // expandable segment was republished on one GPU).
  class HeldHandles {
   public:
    HeldHandles() = default;
    HeldHandles(HeldHandles&& o) noexcept : h_(std::move(o.h_)) { o.h_.clear(); }
    HeldHandles& operator=(HeldHandles&& o) noexcept;
    ~HeldHandles() { reset(); }
    void add(uint64_t h) { h_.push_back(h); }
    void reset() noexcept;

   private:
    std::vector<uint64_t> h_;
  };
  struct VmmExport {
    std::vector<Chunk> chunks;  // id: the driver's allocation handle value
    uint64_t id;
    HeldHandles held;  // keeps those values from being reused while this export lives
  };
  void prune_locked();
  MemHandle export_chunks(const AllocRange& r, const std::vector<Chunk>& chunks);

  int dev_;
  BackendOptions opts_;
  std::mutex mu_;
  uint64_t next_id_ = 0;
  std::map<char*, VmmExport> vmm_;      // exported VMM ranges by base
  std::map<void*, size_t> vmm_opened_;  // open() -> close(): reserved bytes
  std::set<int32_t> peers_;
  std::unique_ptr<FdExports> fd_exports_;  // last: its socket thread stops first
};

}  // namespace peerlink::gpu
