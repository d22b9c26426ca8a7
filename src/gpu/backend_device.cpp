// Device backend: CUDA/HIP memory through the shim (runtime.h). Exported with the runtime's legacy
// IPC handles, or, for VMM memory the legacy API cannot export (cuMemCreate + cuMemMap: PyTorch
// expandable segments), chunk by chunk as POSIX file descriptors (vmm.h, fd_export.h); copies run on copy-engine streams and complete through events. Every stream, event,
// IPC mapping and host registration is held by an owner (owners.h), and every entry point that may
// run on a caller's thread sets the device with a DeviceGuard, which gives the caller's device back.
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "common/format.h"
#include "common/log.h"
#include "gpu/armed_lane.h"
#include "gpu/backend.h"
#include "gpu/owners.h"
#include "gpu/vmm.h"
#include "gpu/vmm_share.h"
#include "peerlink/errors.h"

namespace peerlink::gpu {
namespace {

// Every method takes a DeviceGuard: copies are issued from the transport's workers (bound to the
// device once, so the guard finds it current and switches nothing) and from callers' threads
// (isend's direct steady state issues its copy in the caller), whose current device may be any.
// On CUDA a call on a thread with no current context would create one on device 0, and
// cudaEventRecord on another device's stream fails (seen on 2x H200 before the guard was added).
// Small signalled sends may instead run on an ArmedLane (armed_lane.h), a stream of its own, made
// at the first one. Completion values must land in issue order, so work on one stream that follows
// work on the other waits for it (an event), and the lane's waiting kernel is cancelled first.
class DeviceCopyQueue final : public CopyQueue {
 public:
  DeviceCopyQueue(int dev, int lanes, std::chrono::microseconds arm_window) : dev_(dev), arm_window_(arm_window) {
    DeviceGuard g(dev_);
    // Each resource goes into its owner as soon as it exists: a throw half-way releases the rest.
    for (int i = 0; i < std::max(1, lanes); ++i) lanes_.push_back(StreamOwner::create(dev_));
    for (size_t i = 1; i < lanes_.size(); ++i) lane_done_.push_back(EventOwner::create(dev_));
    fork_ = EventOwner::create(dev_);
    join_ = EventOwner::create(dev_);
  }
  ~DeviceCopyQueue() override {
    try {
      DeviceGuard g(dev_);
      arm_.reset();  // cancels its waiting kernel and drains it
      for (auto& s : lanes_) stream_sync(s.get());
    } catch (...) {
    }
    // Members release themselves (events before streams: declared after them).
  }

  uint64_t copy(void* dst, const void* src, size_t bytes, bool stripe, bool track) override {
    // Copies are also issued from the caller's thread (isend's direct steady state), whose current
    // device may be any (measured on 2x H200: cudaEventRecord on device 1's stream from a thread
    // current on device 0 fails with invalidResourceHandle). The guard costs one cuCtxGetCurrent
    // (7.7 ns measured) when the device already matches.
    DeviceGuard g(dev_);
    after_armed();
    Stream main = lanes_[0].get();
    if (bytes == 0) {
      // nothing to copy; the ticket still orders after earlier work
    } else if (!stripe || lanes_.size() == 1 || bytes < lanes_.size() * 4096) {
      memcpy_async(dst, src, bytes, main);
    } else {
      // Fork: every lane starts after earlier work on the main lane; join before the ticket event.
      event_record(fork_.get(), main);
      size_t n = lanes_.size();
      size_t chunk = ((bytes + n - 1) / n + 4095) & ~size_t(4095);
      for (size_t i = 0; i < n; ++i) {
        size_t off = i * chunk;
        if (off >= bytes) break;
        size_t len = std::min(chunk, bytes - off);
        Stream s = lanes_[i].get();
        if (i > 0) stream_wait_event(s, fork_.get());
        memcpy_async(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off, len, s);
        if (i > 0) {
          event_record(lane_done_[i - 1].get(), s);
          stream_wait_event(main, lane_done_[i - 1].get());
        }
      }
    }
    if (!track) return 0;
    Event e;
    if (!free_events_.empty()) {
      e = free_events_.back();
      free_events_.pop_back();
    } else {
      EventOwner owned(dev_, event_create());  // the pool grows to the number in flight, then stays
      e = owned.get();
      events_.push_back(std::move(owned));
    }
    event_record(e, main);
    pending_.emplace_back(++issued_, e);
    return issued_;
  }

  bool done(uint64_t ticket) override {
    DeviceGuard g(dev_);  // event queries from any thread (see copy())
    while (!pending_.empty() && pending_.front().first <= ticket) {
      if (!event_query(pending_.front().second)) return false;
      free_events_.push_back(pending_.front().second);
      pending_.pop_front();
    }
    return true;
  }

  bool signal_after(uint64_t* host_addr, uint64_t value) override {
    DeviceGuard g(dev_);
    after_armed();
    stream_write_value64(lanes_[0].get(), device_view(host_addr), value);
    return true;
  }

  bool copy_and_signal(void* dst, const void* src, size_t bytes, uint64_t* host_addr, uint64_t value) override {
    DeviceGuard g(dev_);
    void* flag = device_view(host_addr);
    if (bytes <= armed_max()) {
      armed_send(dst, src, bytes, flag, value);
      return true;
    }
    after_armed();
    launch_copy_signal(dst, src, bytes, flag, value, lanes_[0].get());
    return true;
  }

  size_t armed_max() const override { return arm_window_.count() > 0 ? kArmedMaxBytes : 0; }
  void idle(bool sleeping) override {
    if (!arm_) return;
    DeviceGuard g(dev_);
    arm_->idle(sleeping);
  }

  void* device_view(uint64_t* host_addr) {
    auto it = device_addr_.find(host_addr);
    return it != device_addr_.end() ? it->second : (device_addr_[host_addr] = host_device_pointer(host_addr));
  }

  void wait_all() override {
    DeviceGuard g(dev_);
    if (arm_) {
      arm_->disarm();
      stream_sync(arm_->stream());
    }
    for (auto& s : lanes_) stream_sync(s.get());
    done(issued_);
  }

 private:
  // On the armed lane, after what lanes_[0] has (the lane's waiting kernel was launched before it).
  void armed_send(void* dst, const void* src, size_t bytes, void* flag, uint64_t value) {
    if (!arm_) arm_ = std::make_unique<ArmedLane>(dev_, arm_window_);
    if (lanes_busy_) {
      arm_->disarm();
      event_record(join_.get(), lanes_[0].get());
      stream_wait_event(arm_->stream(), join_.get());
      lanes_busy_ = false;
    }
    arm_->send(dst, src, bytes, flag, value);
    arm_->arm();  // after the message left: the launch's ~4.5 us are off its path
    arm_busy_ = true;
  }

  // Work about to go on lanes_[0] follows what the armed lane has (its waiting kernel cancelled).
  void after_armed() {
    lanes_busy_ = true;
    if (!arm_busy_) return;
    arm_->disarm();
    event_record(join_.get(), arm_->stream());
    stream_wait_event(lanes_[0].get(), join_.get());
    arm_busy_ = false;
  }

  int dev_;
  std::chrono::microseconds arm_window_;
  std::vector<StreamOwner> lanes_;
  std::vector<EventOwner> lane_done_;
  EventOwner fork_, join_;
  std::vector<EventOwner> events_;                 // every ticket event ever made (the pool)
  std::deque<std::pair<uint64_t, Event>> pending_;  // tickets in flight (events owned by events_)
  std::vector<Event> free_events_;                  // idle events of the pool
  uint64_t issued_ = 0;
  std::map<uint64_t*, void*> device_addr_;
  std::unique_ptr<ArmedLane> arm_;  // made at the first armed send; released before the streams
  bool lanes_busy_ = false;  // lanes_[0] has work the armed lane is not ordered after
  bool arm_busy_ = false;    // the armed lane has work lanes_[0] is not ordered after
};

class DeviceBackend final : public Backend {
 public:
  DeviceBackend(int dev, const BackendOptions& o)
      : dev_(dev), arm_window_(std::max(0, o.arm_window_us)), vmm_(dev, o) {
    int n = device_count();
    if (dev < 0 || dev >= n)
      throw InvalidArgument(common::format("device {} does not exist ({} sees {} device(s))", dev, runtime_name(), n));
    DeviceGuard g(dev_);  // initializes the device's context now, not on the first transfer
  }
  ~DeviceBackend() override {
    try {
      DeviceGuard g(dev_);
      for (auto& kv : owned_) device_free(kv.first);
    } catch (...) {
    }
    // mappings_ and pins_ release themselves, each under its own guard.
  }

  bool is_host() const override { return false; }
  int device() const override { return dev_; }

  void* alloc(size_t bytes) override {
    if (bytes == 0) throw InvalidArgument("alloc: bytes must be > 0");
    // Refused before the runtime sees it: its allocator rounds the size up (granularity), which
    // wraps for sizes near SIZE_MAX. 2^62 bytes is far beyond any device.
    constexpr size_t kMaxAllocBytes = size_t(1) << 62;
    if (bytes > kMaxAllocBytes)
      throw InvalidArgument(
          common::format("alloc: {} bytes exceeds the limit of {} bytes (device {})", bytes, kMaxAllocBytes, dev_));
    DeviceGuard dg(dev_);
    void* p = device_malloc(bytes);
    try {
      std::lock_guard<std::mutex> g(mu_);
      owned_[static_cast<char*>(p)] = bytes;
    } catch (...) {  // the map could not grow: the allocation must not leak
      device_free(p);
      throw;
    }
    return p;
  }

  void free(void* p) override {
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = owned_.find(static_cast<char*>(p));
      if (it == owned_.end())
        throw InvalidArgument(common::format("free: pointer {} was not returned by alloc on this communicator", p));
      owned_.erase(it);
      ids_.erase(static_cast<char*>(p));
    }
    DeviceGuard dg(dev_);
    device_free(p);
  }

  AllocRange find_allocation(const void* p, size_t len) override {
    DeviceGuard dg(dev_);
    // Pointer queries and, for VMM memory, cuMemRetainAllocationHandle/cuMemRelease: no stream work,
    // made legal while the caller's stream is being captured (publish during capture).
    RelaxedCaptureMode relaxed;
    if (!is_device_pointer(p))
      throw InvalidArgument(common::format("pointer {} is not device memory (device {})", p, dev_));
    // VMM first: its address range is one chunk, and the range may span several (vmm_share.h).
    if (vmm_needs_fd_export(p)) return vmm_.find(p, len);
    AddressRange r = address_range(p);
    auto c = static_cast<const char*>(p);
    auto base = static_cast<char*>(r.base);
    if (len > static_cast<size_t>(base + r.size - c))
      throw InvalidArgument(common::format("range [{}, +{}) runs past the end of its allocation ({} bytes at {})", p,
                                           len, r.size, r.base));
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
    DeviceGuard dg(dev_);
    RelaxedCaptureMode relaxed;  // legal while a stream of the process is being captured
    MemHandle vh;
    if (vmm_.export_range(r, &vh)) return vh;
    MemHandle h;
    h.kind = HandleKind::DeviceIpc;
    h.alloc_id = r.alloc_id;
    h.alloc_bytes = r.bytes;
    h.owner_base = reinterpret_cast<uint64_t>(r.base);
    ipc_get_handle(r.base, h.data);
    return h;
  }

  // Mappings are owned here until close(): whatever the transport leaves open is closed when the
  // backend goes. A multimap: the runtime may hand out one address for two opens (refcounted).
  void* open(const MemHandle& h) override {
    if (h.kind == HandleKind::DeviceVmm) return vmm_.open(h);
    if (h.kind != HandleKind::DeviceIpc) throw Error("device backend cannot open a host SHM handle");
    RelaxedCaptureMode relaxed;  // opening is no stream work: legal while a stream is captured
    IpcMapping m = IpcMapping::open(dev_, h.data);
    void* base = m.get();
    std::lock_guard<std::mutex> g(mu_);
    mappings_.emplace(base, std::move(m));
    return base;
  }
  void close(const MemHandle& h, void* base) override {
    if (h.kind == HandleKind::DeviceVmm) return vmm_.close(base);
    IpcMapping m;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = mappings_.find(base);
      if (it == mappings_.end()) return;  // not open (closed twice): nothing to do
      m = std::move(it->second);
      mappings_.erase(it);
    }
    // m closes here, outside the lock, under its DeviceGuard
  }

  std::unique_ptr<CopyQueue> make_queue(int lanes) override {
    return std::make_unique<DeviceCopyQueue>(dev_, lanes, arm_window_);
  }
  // Registrations are owned here until unpin(); the backend's destructor unpins the rest.
  void pin(void* p, size_t bytes) override {
    HostRegistration r = HostRegistration::create(dev_, p, bytes);
    std::lock_guard<std::mutex> g(mu_);
    pins_.insert_or_assign(p, std::move(r));
  }
  void unpin(void* p) override {
    HostRegistration r;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = pins_.find(p);
      if (it == pins_.end()) return;
      r = std::move(it->second);
      pins_.erase(it);
    }
  }
  void copy_sync(void* dst, const void* src, size_t bytes) override {
    DeviceGuard dg(dev_);
    memcpy_sync(dst, src, bytes);
  }
  void bind_worker_thread() override { set_device(dev_); }
  // Two communicators of one process on two GPUs (nccl-tests -g 2) use each other's memory by
  // pointer; kernels (allreduce, stream send/recv) need peer access for that, which IPC-opened memory
  // gets from the open (seen on 2x H200: an illegal address in sendrecv_perf -g 2 without it).
  void share_in_process(void* base) override {
    int holder = pointer_device(base);
    if (holder >= 0 && holder != dev_) enable_peer_access(dev_, holder);
  }

  void set_peer_pids(const std::vector<int32_t>& pids_by_rank) override {  // 0 = this rank
    std::vector<int32_t> pids;
    for (int32_t p : pids_by_rank)
      if (p > 0) pids.push_back(p);
    vmm_.set_peer_pids(pids);
  }

 private:

  int dev_;
  std::chrono::microseconds arm_window_;  // the copy queues' armed sends (0: none)
  std::mutex mu_;
  std::map<char*, size_t> owned_;
  std::map<char*, std::pair<uint64_t, size_t>> ids_;  // base -> (alloc id, size)
  std::multimap<void*, IpcMapping> mappings_;          // open() -> close()
  std::map<void*, HostRegistration> pins_;             // pin() -> unpin()
  uint64_t next_id_ = 0;
  VmmShare vmm_;  // VMM memory shared by file descriptor (vmm_share.h)
};

}  // namespace

std::unique_ptr<Backend> make_device_backend(int device, const BackendOptions& opts) {
  return std::make_unique<DeviceBackend>(device, opts);
}

}  // namespace peerlink::gpu
