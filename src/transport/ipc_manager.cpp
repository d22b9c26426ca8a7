#include "transport/ipc_manager.h"

#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::detail {

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
    ctr_.exports.fetch_add(1, std::memory_order_relaxed);
    if (gpu::is_fd_handle(h.kind)) ctr_.exports_fd.fetch_add(1, std::memory_order_relaxed);
  }
  *offset = static_cast<uint64_t>(static_cast<const char*>(p) - r.base);
  return it->second.handle;
}

std::shared_ptr<Mapping> IpcManager::open_locked(int peer, const gpu::MemHandle& h) {
  AllocKey k = key_of(peer, h);
  auto it = mappings_.find(k);
  if (it != mappings_.end())
    if (auto m = it->second.lock()) return m;
  std::shared_ptr<Mapping> m;
  if (h.owner_pid == self_.pid && h.owner_start == self_.start_time) {
    m = std::make_shared<Mapping>(be_, ctr_, h, reinterpret_cast<char*>(h.owner_base), false);
  } else {
    char* base = static_cast<char*>(be_.open(h));
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
  exports_.erase(static_cast<char*>(const_cast<void*>(base)));
}

void* IpcManager::acquire(int peer, const gpu::MemHandle& h) {
  std::lock_guard<std::mutex> g(mu_);
  auto& slot = acquired_[key_of(peer, h)];
  if (!slot.first) slot.first = open_locked(peer, h);
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
    exports_.clear();
  }
  b.clear();
  a.clear();
}

}  // namespace peerlink::detail
