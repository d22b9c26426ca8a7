// Device backend: CUDA/HIP memory through the shim (runtime.h). Exported with the runtime's legacy
// IPC handles; copies run on copy-engine streams and complete through events.
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "gpu/backend.h"
#include "peerlink/errors.h"

namespace peerlink::gpu {
namespace {

using common::cat;

// The current device is per thread in CUDA/HIP: every entry point that may run on a worker thread
// makes sure this thread targets our device.
void ensure_device(int dev) {
  thread_local int current = -2;
  if (current != dev) {
    set_device(dev);
    current = dev;
  }
}

class DeviceCopyQueue final : public CopyQueue {
 public:
  DeviceCopyQueue(int dev, int lanes) : dev_(dev) {
    ensure_device(dev_);
    for (int i = 0; i < std::max(1, lanes); ++i) lanes_.push_back(stream_create());
    for (size_t i = 1; i < lanes_.size(); ++i) lane_done_.push_back(event_create());
    fork_ = event_create();
  }
  ~DeviceCopyQueue() override {
    try {
      ensure_device(dev_);
      for (Stream s : lanes_) stream_sync(s);
    } catch (...) {
    }
    for (auto& p : pending_) event_destroy(p.second);
    for (Event e : free_events_) event_destroy(e);
    for (Event e : lane_done_) event_destroy(e);
    event_destroy(fork_);
    for (Stream s : lanes_) stream_destroy(s);
  }

  uint64_t copy(void* dst, const void* src, size_t bytes, bool stripe, bool track) override {
    ensure_device(dev_);
    Stream main = lanes_[0];
    if (bytes == 0) {
      // nothing to copy; the ticket still orders after earlier work
    } else if (!stripe || lanes_.size() == 1 || bytes < lanes_.size() * 4096) {
      memcpy_async(dst, src, bytes, main);
    } else {
      // Fork: every lane starts after earlier work on the main lane; join before the ticket event.
      event_record(fork_, main);
      size_t n = lanes_.size();
      size_t chunk = ((bytes + n - 1) / n + 4095) & ~size_t(4095);
      for (size_t i = 0; i < n; ++i) {
        size_t off = i * chunk;
        if (off >= bytes) break;
        size_t len = std::min(chunk, bytes - off);
        Stream s = lanes_[i];
        if (i > 0) stream_wait_event(s, fork_);
        memcpy_async(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off, len, s);
        if (i > 0) {
          event_record(lane_done_[i - 1], s);
          stream_wait_event(main, lane_done_[i - 1]);
        }
      }
    }
    if (!track) return 0;
    Event e;
    if (!free_events_.empty()) {
      e = free_events_.back();
      free_events_.pop_back();
    } else {
      e = event_create();
    }
    event_record(e, main);
    pending_.emplace_back(++issued_, e);
    return issued_;
  }

  bool done(uint64_t ticket) override {
    while (!pending_.empty() && pending_.front().first <= ticket) {
      if (!event_query(pending_.front().second)) return false;
      free_events_.push_back(pending_.front().second);
      pending_.pop_front();
    }
    return true;
  }

  bool signal_after(uint64_t* host_addr, uint64_t value) override {
    ensure_device(dev_);
    stream_write_value64(lanes_[0], device_view(host_addr), value);
    return true;
  }

  bool copy_and_signal(void* dst, const void* src, size_t bytes, uint64_t* host_addr, uint64_t value) override {
    ensure_device(dev_);
    launch_copy_signal(dst, src, bytes, device_view(host_addr), value, lanes_[0]);
    return true;
  }

  void* device_view(uint64_t* host_addr) {
    auto it = device_addr_.find(host_addr);
    return it != device_addr_.end() ? it->second : (device_addr_[host_addr] = host_device_pointer(host_addr));
  }

  void wait_all() override {
    ensure_device(dev_);
    for (Stream s : lanes_) stream_sync(s);
    done(issued_);
  }

 private:
  int dev_;
  std::vector<Stream> lanes_;
  std::vector<Event> lane_done_;
  Event fork_ = nullptr;
  std::deque<std::pair<uint64_t, Event>> pending_;
  std::vector<Event> free_events_;
  uint64_t issued_ = 0;
  std::map<uint64_t*, void*> device_addr_;
};

class DeviceBackend final : public Backend {
 public:
  explicit DeviceBackend(int dev) : dev_(dev) {
    int n = device_count();
    if (dev < 0 || dev >= n)
      throw InvalidArgument(cat("device ", dev, " does not exist (", runtime_name(), " sees ", n, " device(s))"));
    ensure_device(dev_);
  }
  ~DeviceBackend() override {
    for (auto& kv : owned_) device_free(kv.first);
  }

  bool is_host() const override { return false; }
  int device() const override { return dev_; }

  void* alloc(size_t bytes) override {
    if (bytes == 0) throw InvalidArgument("alloc: bytes must be > 0");
    // Refused before the runtime sees it: its allocator rounds the size up (granularity), which
    // wraps for sizes near SIZE_MAX. 2^62 bytes is far beyond any device.
    constexpr size_t kMaxAllocBytes = size_t(1) << 62;
    if (bytes > kMaxAllocBytes)
      throw InvalidArgument(cat("alloc: ", bytes, " bytes exceeds the limit of ", kMaxAllocBytes,
                                " bytes (device ", dev_, ")"));
    ensure_device(dev_);
    void* p = device_malloc(bytes);
    std::lock_guard<std::mutex> g(mu_);
    owned_[static_cast<char*>(p)] = bytes;
    return p;
  }

  void free(void* p) override {
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = owned_.find(static_cast<char*>(p));
      if (it == owned_.end())
        throw InvalidArgument(cat("free: pointer ", p, " was not returned by alloc on this communicator"));
      owned_.erase(it);
      ids_.erase(static_cast<char*>(p));
    }
    ensure_device(dev_);
    device_free(p);
  }

  AllocRange find_allocation(const void* p, size_t len) override {
    ensure_device(dev_);
    if (!is_device_pointer(p))
      throw InvalidArgument(cat("pointer ", p, " is not device memory (device ", dev_, ")"));
    AddressRange r = address_range(p);
    auto c = static_cast<const char*>(p);
    auto base = static_cast<char*>(r.base);
    if (len > static_cast<size_t>(base + r.size - c))
      throw InvalidArgument(cat("range [", p, ", +", len, ") runs past the end of its allocation (", r.size,
                                " bytes at ", r.base, ")"));
    if (!ipc_capable(base))
      throw UnsupportedError(cat("device memory at ", p, " (allocation ", r.base, ", ", r.size,
                                 " bytes) cannot be exported with CUDA/HIP IPC handles: it is VMM memory "
                                 "(e.g. PyTorch expandable_segments). Allocate it with Communicator::alloc "
                                 "or disable expandable segments."));
    // The runtime's buffer id tells a re-allocation at the same address apart from the old one.
    uint64_t id = buffer_id(base);
    if (id != 0) return AllocRange{base, r.size, id};
    std::lock_guard<std::mutex> g(mu_);
    auto it = ids_.find(base);
    if (it == ids_.end() || it->second.second != r.size)
      it = ids_.insert_or_assign(base, std::make_pair(++next_id_ | (uint64_t(1) << 63), r.size)).first;
    return AllocRange{base, r.size, it->second.first};
  }

  MemHandle export_allocation(const AllocRange& r) override {
    ensure_device(dev_);
    MemHandle h;
    h.kind = HandleKind::DeviceIpc;
    h.alloc_id = r.alloc_id;
    h.alloc_bytes = r.bytes;
    h.owner_base = reinterpret_cast<uint64_t>(r.base);
    ipc_get_handle(r.base, h.data);
    return h;
  }

  void* open(const MemHandle& h) override {
    if (h.kind != HandleKind::DeviceIpc) throw Error("device backend cannot open a host SHM handle");
    ensure_device(dev_);
    return ipc_open(h.data);
  }
  void close(const MemHandle&, void* base) override {
    ensure_device(dev_);
    ipc_close(base);
  }

  std::unique_ptr<CopyQueue> make_queue(int lanes) override {
    return std::make_unique<DeviceCopyQueue>(dev_, lanes);
  }
  void pin(void* p, size_t bytes) override {
    ensure_device(dev_);
    host_register(p, bytes);
  }
  void unpin(void* p) override { host_unregister(p); }
  void copy_sync(void* dst, const void* src, size_t bytes) override {
    ensure_device(dev_);
    memcpy_sync(dst, src, bytes);
  }

 private:
  int dev_;
  std::mutex mu_;
  std::map<char*, size_t> owned_;
  std::map<char*, std::pair<uint64_t, size_t>> ids_;  // base -> (alloc id, size)
  uint64_t next_id_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_device_backend(int device) { return std::make_unique<DeviceBackend>(device); }

}  // namespace peerlink::gpu
