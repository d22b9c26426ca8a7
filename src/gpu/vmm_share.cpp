#include "gpu/vmm_share.h"

#include <unistd.h>

#include "common/format.h"
#include "common/log.h"
#include "gpu/owners.h"
#include "gpu/vmm.h"
#include "peerlink/errors.h"

namespace peerlink::gpu {

VmmShare::VmmShare(int dev, const BackendOptions& o)
    : dev_(dev), opts_(o), fd_exports_(std::make_unique<FdExports>(o.job_prefix, o.fd_passing)) {}

VmmShare::~VmmShare() {
  fd_exports_.reset();  // no request is served while the table goes
  if (vmm_opened_.empty()) return;
  try {
    DeviceGuard g(dev_);
    for (auto& kv : vmm_opened_) vmm_unmap_range(kv.first, kv.second);
  } catch (...) {
  }
}

void VmmShare::set_peer_pids(const std::vector<int32_t>& pids) {
  fd_exports_->set_peer_pids(pids);
  std::lock_guard<std::mutex> g(mu_);
  peers_ = std::set<int32_t>(pids.begin(), pids.end());
}

bool VmmShare::export_range(const AllocRange& r, MemHandle* h) {
  std::vector<Chunk> chunks;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto v = vmm_.find(r.base);
    if (v == vmm_.end() || v->second.id != r.alloc_id) return false;
    chunks = v->second.chunks;
  }
  *h = export_chunks(r, chunks);
  return true;
}

void VmmShare::close(void* base) {
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = vmm_opened_.find(base);
    if (it == vmm_opened_.end()) return;  // not open (closed twice): nothing to do
    bytes = it->second;
    vmm_opened_.erase(it);
  }
  DeviceGuard dg(dev_);
  vmm_unmap_range(base, bytes);
}

// The chunks behind [p, p+len) (chunks.h); one allocation id per distinct chunk list at a base,
// so a chunk freed and re-created at the same address is a new allocation for every peer.
VmmShare::HeldHandles& VmmShare::HeldHandles::operator=(HeldHandles&& o) noexcept {
  if (this != &o) {
    reset();
    h_ = std::move(o.h_);
    o.h_.clear();
  }
  return *this;
}

void VmmShare::HeldHandles::reset() noexcept {
  for (uint64_t x : h_) vmm_release(x);
  h_.clear();
}

AllocRange VmmShare::find(const void* p, size_t len) {
  uint64_t b0 = 0, s0 = 0, h0 = 0;
  if (!vmm_chunk_at(p, &b0, &s0, &h0))
    throw UnsupportedError(
        common::format("device memory [{}, +{}) cannot be exported: the legacy IPC API refuses it and it is not a VMM "
                       "mapping either (stream-ordered pool or managed memory?). Publish memory from "
                       "Communicator::alloc, cudaMalloc or a VMM allocation",
                       p, len));
  vmm_release(h0);
  HeldHandles held;  // this call's references; a new export keeps them (HeldHandles)
  std::vector<Chunk> chunks = walk_chunks(
      reinterpret_cast<uint64_t>(p), len,
      [&held](uint64_t a, Chunk* out) {
        uint64_t b = 0, s = 0, h = 0;
        if (!vmm_chunk_at(reinterpret_cast<void*>(a), &b, &s, &h)) return false;
        held.add(h);
        *out = Chunk{b, s, h};
        return true;
      },
      kMaxManifestChunks);
  char* base = reinterpret_cast<char*>(chunks.front().base);
  size_t bytes = chunks.back().base + chunks.back().size - chunks.front().base;
  std::lock_guard<std::mutex> g(mu_);
  auto it = vmm_.find(base);
  if (it == vmm_.end() || it->second.chunks != chunks) {
    prune_locked();  // drops exports whose chunks were freed or replaced
    it = vmm_.find(base);  // still live but another chunk list (a longer or shorter range): replaced
    if (it != vmm_.end()) fd_exports_->remove(it->second.id);
    it = vmm_.insert_or_assign(base, VmmExport{chunks, ++next_id_ | (uint64_t(1) << 62), std::move(held)}).first;
    common::log_line(
        LogLevel::Info, opts_.log_level,
        common::format(
            "device memory [{}, +{}) is VMM memory: {} chunk(s), {} bytes at {}; exported by file descriptor ({})", p,
            len, chunks.size(), bytes, static_cast<void*>(base), common::fd_passing_name(opts_.fd_passing)));
  }
  return AllocRange{base, bytes, it->second.id};
}

// Exported descriptors keep their physical chunks alive: an export whose chunks the owner has
// unmapped or replaced (the caching allocator released them) is dropped here, when the next new
// VMM export is made, so freed device memory is returned to the driver then at the latest (peers
// that still map it keep it until they rebind). Peers asking for a dropped export are refused.
void VmmShare::prune_locked() {
  for (auto it = vmm_.begin(); it != vmm_.end();) {
    bool live = true;
    for (const Chunk& c : it->second.chunks) {
      uint64_t b = 0, s = 0, h = 0;
      bool mapped = vmm_chunk_at(reinterpret_cast<void*>(c.base), &b, &s, &h);
      if (mapped) vmm_release(h);
      if (!mapped || b != c.base || s != c.size || h != c.id) {
        live = false;
        break;
      }
    }
    if (live) {
      ++it;
      continue;
    }
    fd_exports_->remove(it->second.id);
    it = vmm_.erase(it);
  }
}

MemHandle VmmShare::export_chunks(const AllocRange& r, const std::vector<Chunk>& chunks) {
  std::vector<common::UniqueFd> fds;
  std::vector<uint64_t> sizes;
  for (const Chunk& c : chunks) {
    uint64_t b = 0, s = 0, h = 0;
    if (!vmm_chunk_at(reinterpret_cast<void*>(c.base), &b, &s, &h) || b != c.base || s != c.size || h != c.id) {
      if (h) vmm_release(h);
      throw InvalidArgument(
          common::format("VMM range at {}: the chunk at 0x{:x} changed while it was being exported (freed or remapped)",
                         static_cast<void*>(r.base), c.base));
    }
    try {
      fds.emplace_back(vmm_export_fd(h));
    } catch (const UnsupportedError& e) {
      vmm_release(h);
      throw UnsupportedError(common::format("device memory [{}, +{}) cannot be shared: {}", static_cast<void*>(r.base),
                                            r.bytes, e.what()));
    } catch (...) {
      vmm_release(h);
      throw;
    }
    vmm_release(h);
    sizes.push_back(c.size);
  }
  MemHandle h;
  h.kind = HandleKind::DeviceVmm;
  h.owner_pid = getpid();
  h.alloc_id = r.alloc_id;
  h.alloc_bytes = r.bytes;
  h.owner_base = reinterpret_cast<uint64_t>(r.base);
  fd_exports_->add(r.alloc_id, std::move(fds), sizes, &h);
  return h;
}

void* VmmShare::open(const MemHandle& h) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!peers_.empty() && peers_.count(h.owner_pid) == 0)
      throw Error(common::format("VMM handle names process {}, which is not a rank of this job", h.owner_pid));
  }
  ImportedFds in = import_fds(h, opts_.fd_passing, opts_.job_prefix, opts_.timeout_ms, false);
  DeviceGuard dg(dev_);
  RelaxedCaptureMode relaxed;
  std::vector<uint64_t> handles, sizes;
  void* base = nullptr;
  try {
    for (size_t i = 0; i < in.chunks.size(); ++i) {
      handles.push_back(vmm_import_fd(in.chunks[i].get()));
      sizes.push_back(in.entries[i].size);
    }
    base = vmm_map_chunks(dev_, handles.data(), sizes.data(), handles.size());
  } catch (...) {
    for (uint64_t x : handles) vmm_release(x);
    throw;
  }
  for (uint64_t x : handles) vmm_release(x);  // the mappings hold the memory; descriptors close with `in`
  common::log_line(LogLevel::Info, opts_.log_level,
                   common::format("opened VMM allocation {} of process {} ({} bytes, {} chunk(s)) via {} at {}",
                                  h.alloc_id, h.owner_pid, h.alloc_bytes, sizes.size(), in.via, base));
  std::lock_guard<std::mutex> g(mu_);
  vmm_opened_[base] = h.alloc_bytes;
  return base;
}

}  // namespace peerlink::gpu
