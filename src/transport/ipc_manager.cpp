#include "transport/ipc_manager.h"

#include <cstring>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::detail {
namespace {

// Every allocation exported by an IpcManager of this process, by base address: what an in-process
// handle (owner pid == ours) must match before its owner_base is used as a pointer. Lock order:
// an IpcManager's mu_ first, then this table's.
struct ProcessExport {
  gpu::HandleKind kind;
  uint64_t alloc_id;
  uint64_t bytes;
  const IpcManager* owner;
  int rank;
};
std::mutex& process_exports_mu() {
  static std::mutex mu;
  return mu;
}
std::map<uint64_t, ProcessExport>& process_exports() {
  static std::map<uint64_t, ProcessExport> table;
  return table;
}

// An allocation (same owner, same id) always travels with the same handle: one that differs from
// the handle its mapping was opened with (size, base, name) is forged, and its size must not be
// what a later bounds check trusts.
void check_same_allocation(int peer, const gpu::MemHandle& mapped, const gpu::MemHandle& h) {
  if (mapped.kind == h.kind && mapped.alloc_bytes == h.alloc_bytes && mapped.owner_base == h.owner_base &&
      std::memcmp(mapped.data, h.data, sizeof h.data) == 0)
    return;
  throw Error(
      common::format("rejected a buffer handle from rank {}: allocation id {} is already mapped as {} bytes at 0x{:x} "
                     "but this handle says {} bytes at 0x{:x} (forged or corrupt handle)",
                     peer, h.alloc_id, mapped.alloc_bytes, mapped.owner_base, h.alloc_bytes, h.owner_base));
}

}  // namespace

Mapping::~Mapping() {
  if (!owned_) return;
  try {
    be_.close(handle_, base_);
  } catch (...) {
    // Closing must not throw from a destructor; the mapping dies with the process anyway.
  }
  ctr_.closes.fetch_add(1, std::memory_order_relaxed);
}

gpu::MemHandle IpcManager::export_range(const void* p, size_t len, uint64_t* offset) {
  gpu::AllocRange r = be_.find_allocation(p, len);  // throws InvalidArgument / UnsupportedError
  std::lock_guard<std::mutex> g(mu_);
  auto it = exports_.find(r.base);
  if (it == exports_.end() || it->second.bytes != r.bytes || it->second.handle.alloc_id != r.alloc_id) {
    gpu::MemHandle h = be_.export_allocation(r);
    h.owner_pid = self_.pid;
    h.owner_start = self_.start_time;
    it = exports_.insert_or_assign(r.base, Exported{h, r.base, r.bytes}).first;
    {
      std::lock_guard<std::mutex> gp(process_exports_mu());
      process_exports()[h.owner_base] = ProcessExport{h.kind, h.alloc_id, h.alloc_bytes, this, rank_};
    }
    ctr_.exports.fetch_add(1, std::memory_order_relaxed);
    if (gpu::is_fd_handle(h.kind)) ctr_.exports_fd.fetch_add(1, std::memory_order_relaxed);
  }
  *offset = static_cast<uint64_t>(static_cast<const char*>(p) - r.base);
  return it->second.handle;
}

char* IpcManager::in_process_base(int peer, const gpu::MemHandle& h) const {
  auto reject = [&](const char* why) {
    throw Error(
        common::format("rejected a buffer handle from rank {} that claims to be owned by this process (pid {}, base "
                       "0x{:x}, allocation id {}, {} bytes): {} (forged or corrupt handle)",
                       peer, h.owner_pid, h.owner_base, h.alloc_id, h.alloc_bytes, why));
  };
  std::lock_guard<std::mutex> gp(process_exports_mu());
  auto it = process_exports().find(h.owner_base);
  if (it == process_exports().end()) reject("no allocation exported by this process starts there");
  const ProcessExport& e = it->second;
  if (e.alloc_id != h.alloc_id || e.bytes != h.alloc_bytes || e.kind != h.kind)
    reject(common::format("the allocation exported there is id {}, {} bytes", e.alloc_id, e.bytes).c_str());
  if (e.owner == this) reject("it names one of this rank's own allocations, never a peer's buffer");
  if (e.rank >= 0 && peer >= 0 && e.rank != peer)
    reject(common::format("that allocation was exported by rank {}", e.rank).c_str());
  return reinterpret_cast<char*>(h.owner_base);
}

std::shared_ptr<Mapping> IpcManager::open_locked(int peer, const gpu::MemHandle& h) {
  AllocKey k = key_of(peer, h);
  auto it = mappings_.find(k);
  if (it != mappings_.end())
    if (auto m = it->second.lock()) {
      check_same_allocation(peer, m->handle(), h);
      return m;
    }
  std::shared_ptr<Mapping> m;
  if (h.owner_pid == self_.pid && h.owner_start == self_.start_time) {
    char* base = in_process_base(peer, h);
    be_.share_in_process(base);
    m = std::make_shared<Mapping>(be_, ctr_, h, base, false);
  } else {
    char* base = static_cast<char*>(be_.open_from(h, peer));
    ctr_.opens.fetch_add(1, std::memory_order_relaxed);
    if (gpu::is_fd_handle(h.kind)) ctr_.opens_fd.fetch_add(1, std::memory_order_relaxed);
    m = std::make_shared<Mapping>(be_, ctr_, h, base, true);
  }
  mappings_[k] = m;
  return m;
}

Binding IpcManager::bind(int peer, const Publication& pub) {
  std::shared_ptr<Mapping> released;  // closed outside the lock, after the new mapping exists
  std::lock_guard<std::mutex> g(mu_);
  auto key = std::make_pair(peer, pub.buf_id);
  auto it = bindings_.find(key);
  if (it != bindings_.end() && it->second.version == pub.version && it->second.offset == pub.offset &&
      it->second.len == pub.len && it->second.map && key_of(peer, it->second.map->handle()) == key_of(peer, pub.handle))
    return it->second;
  Binding b;
  b.version = pub.version;
  b.offset = pub.offset;
  b.len = pub.len;
  b.map = open_locked(peer, pub.handle);
  b.ptr = b.map->base() + pub.offset;
  if (it != bindings_.end()) {
    released = std::move(it->second.map);
    it->second = b;
  } else {
    bindings_.emplace(key, b);
  }
  return b;
}

void IpcManager::forget_export(const void* base) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = exports_.find(static_cast<char*>(const_cast<void*>(base)));
  if (it == exports_.end()) return;
  {
    std::lock_guard<std::mutex> gp(process_exports_mu());
    auto pe = process_exports().find(it->second.handle.owner_base);
    if (pe != process_exports().end() && pe->second.owner == this) process_exports().erase(pe);
  }
  exports_.erase(it);
}

void IpcManager::unregister_exports_locked() {
  std::lock_guard<std::mutex> gp(process_exports_mu());
  for (auto& [base, e] : exports_) {
    auto pe = process_exports().find(e.handle.owner_base);
    if (pe != process_exports().end() && pe->second.owner == this) process_exports().erase(pe);
  }
  exports_.clear();
}

void* IpcManager::acquire(int peer, const gpu::MemHandle& h) {
  std::lock_guard<std::mutex> g(mu_);
  auto& slot = acquired_[key_of(peer, h)];
  if (!slot.first) {
    try {
      slot.first = open_locked(peer, h);
    } catch (...) {
      acquired_.erase(key_of(peer, h));
      throw;
    }
  } else {
    check_same_allocation(peer, slot.first->handle(), h);
  }
  ++slot.second;
  return slot.first->base();
}

void IpcManager::release(int peer, const gpu::MemHandle& h) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = acquired_.find(key_of(peer, h));
  if (it == acquired_.end()) return;
  if (--it->second.second <= 0) acquired_.erase(it);
}

void IpcManager::close_all() {
  std::map<std::pair<int, uint32_t>, Binding> b;
  std::map<AllocKey, std::pair<std::shared_ptr<Mapping>, int>> a;
  {
    std::lock_guard<std::mutex> g(mu_);
    b.swap(bindings_);
    a.swap(acquired_);
    unregister_exports_locked();
  }
  b.clear();
  a.clear();
}

}  // namespace peerlink::detail
