// Owners of GPU resources (RAII) and the device guard, on the shim's functions (runtime.h). Each
// owner is move-only and releases what it holds exactly once, in its destructor or reset(); an
// object that holds owners as members leaks nothing when its constructor throws half-way (the
// members built so far are destroyed). Release never throws: a runtime that fails to destroy a
// resource at teardown has nothing left to report it to.
#pragma once
#include <cstddef>
#include <utility>

#include "gpu/runtime.h"

namespace peerlink::gpu {

// Sets this thread's current device to `dev` for the guard's scope and puts the caller's back
// (exactly: on CUDA the caller's context, including "none") when the scope ends. dev < 0 (the host
// backend) is a no-op. When `dev` is already current nothing is switched or restored; the check
// costs one cuCtxGetCurrent / hipGetDevice (a thread-local read in the runtime, ~8 ns measured on
// H200), which replaces the old thread_local cache: that cache went stale as soon as the user
// called cudaSetDevice / torch.cuda.set_device on the same thread.
class DeviceGuard {
 public:
  explicit DeviceGuard(int dev) : saved_(enter_device(dev)) {}
  ~DeviceGuard() { leave_device(saved_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  bool switched() const { return saved_.changed; }

 private:
  SavedDevice saved_;
};

// A move-only owner of one runtime handle (a pointer-sized handle: stream, event, graph, device or
// host address) made on device `dev`. Release runs under a DeviceGuard for that device: the
// releasing thread's current device may be anything, or none, and on CUDA a runtime call on a
// thread without a current context would create one on device 0 (measured: a cudaMemcpyAsync on
// another device's stream did). dev < 0: released as is (host build, tests).
template <void (*Release)(void*)>
class DeviceBound {
 public:
  DeviceBound() = default;
  DeviceBound(int dev, void* p) : dev_(dev), p_(p) {}
  ~DeviceBound() { reset(); }
  DeviceBound(DeviceBound&& o) noexcept : dev_(o.dev_), p_(std::exchange(o.p_, nullptr)) {}
  DeviceBound& operator=(DeviceBound&& o) noexcept {
    if (this != &o) {
      reset();
      dev_ = o.dev_;
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  DeviceBound(const DeviceBound&) = delete;
  DeviceBound& operator=(const DeviceBound&) = delete;

  void* get() const { return p_; }
  // Typed view (Stream and Event are void* in runtime.h; this reads better at call sites).
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  int device() const { return dev_; }
  explicit operator bool() const { return p_ != nullptr; }
  void* release() { return std::exchange(p_, nullptr); }
  void reset() noexcept {
    void* p = std::exchange(p_, nullptr);
    if (!p) return;
    try {
      DeviceGuard g(dev_);
      Release(p);
    } catch (...) {
      // The guard could not switch (the device is gone): release from here rather than leak.
      Release(p);
    }
  }

 private:
  int dev_ = -1;
  void* p_ = nullptr;
};

// A non-blocking stream (stream_create) / an event without timing (event_create) or with it.
class StreamOwner : public DeviceBound<stream_destroy> {
 public:
  using DeviceBound::DeviceBound;
  static StreamOwner create(int dev) {
    DeviceGuard g(dev);
    return StreamOwner(dev, stream_create());
  }
};
class EventOwner : public DeviceBound<event_destroy> {
 public:
  using DeviceBound::DeviceBound;
  static EventOwner create(int dev) {
    DeviceGuard g(dev);
    return EventOwner(dev, event_create());
  }
  static EventOwner create_timed(int dev) {
    DeviceGuard g(dev);
    return EventOwner(dev, event_create_timed());
  }
};
// An instantiated graph (stream_end_capture).
using GraphExecOwner = DeviceBound<graph_destroy>;

// Pinned host memory mapped into the device (host_alloc_mapped), zeroed.
class MappedHostAlloc : public DeviceBound<host_free_mapped> {
 public:
  using DeviceBound::DeviceBound;
  static MappedHostAlloc create(int dev, size_t bytes) {
    DeviceGuard g(dev);
    return MappedHostAlloc(dev, host_alloc_mapped(bytes));
  }
};

// A device allocation the library owns (device_malloc / device_malloc_flags).
class DeviceAlloc : public DeviceBound<device_free> {
 public:
  using DeviceBound::DeviceBound;
  static DeviceAlloc create(int dev, size_t bytes) {
    DeviceGuard g(dev);
    return DeviceAlloc(dev, device_malloc(bytes));
  }
};

// A peer's allocation opened from its IPC handle (ipc_open), closed on the device that opened it.
class IpcMapping : public DeviceBound<ipc_close> {
 public:
  using DeviceBound::DeviceBound;
  static IpcMapping open(int dev, const unsigned char handle[kIpcHandleBytes]) {
    DeviceGuard g(dev);
    return IpcMapping(dev, ipc_open(handle));
  }
};

// Host memory pinned and mapped for the device (host_register), unregistered on release.
class HostRegistration : public DeviceBound<host_unregister> {
 public:
  using DeviceBound::DeviceBound;
  static HostRegistration create(int dev, void* p, size_t bytes) {
    DeviceGuard g(dev);
    host_register(p, bytes);
    return HostRegistration(dev, p);
  }
};

}  // namespace peerlink::gpu
