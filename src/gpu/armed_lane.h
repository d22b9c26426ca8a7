// Small sends of the host-driven path with their kernel launched ahead of the message. Launching a
// kernel costs the host 4.2-5.2 us on the 2x H100 machine (cudaLaunchKernel and cuLaunchKernel
// alike), and a launched copy + system fence + completion store reaches host memory 5.6 us after
// that; a kernel already waiting for its descriptor in device-visible host memory takes 4.4 us from
// the host's store of the descriptor to the completion it sees. So after
// every send the lane keeps a kernel waiting for the next one: it polls the next slot until the
// host fills it (the message starts at once) or cancels it, and after a send goes on to the slot
// after, so a burst costs no launch per message. Only the host decides between fill and cancel,
// so no fill can come too late: the transport's send worker cancels a kernel that waited longer
// than the window (idle()), and before it sleeps. Idle cost: one polling block on the GPU for about
// the window after the last send; a cudaDeviceSynchronize in that time waits for it.
// A stream wait on a host-memory doorbell (cuStreamWaitValue64) instead of a polling kernel
// measured 18.3 us fill-to-completion: not used.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "gpu/owners.h"
#include "gpu/runtime.h"

namespace peerlink::gpu {

class ArmedLane {
 public:
  // window: how long an armed kernel may wait for its message before idle() cancels it (> 0).
  ArmedLane(int dev, std::chrono::microseconds window);
  ~ArmedLane();  // cancels a waiting kernel, waits for the lane
  ArmedLane(const ArmedLane&) = delete;
  ArmedLane& operator=(const ArmedLane&) = delete;

  // Enqueues on the lane: dst <- src (bytes <= kArmedMaxBytes), a system-scope fence, then the store
  // of `value` at flag_dev (device address): through the armed kernel when one waits, else through a
  // copy kernel launched now. The caller holds the device (DeviceGuard) and serializes the calls.
  void send(void* dst, const void* src, size_t bytes, void* flag_dev, uint64_t value);
  // Launches a kernel for the next send (no-op when one waits already).
  void arm();
  // Cancels the waiting kernel when it has waited for the window (always when `all`).
  void idle(bool all);
  // A waiting kernel returns at once (the lane drains).
  void disarm();
  Stream stream() const { return stream_.get(); }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr uint64_t kSlots = kArmedSlots;
  // The slot of send `seq` once its previous user (seq - kSlots) has let it go.
  ArmedSlot* slot_for(uint64_t seq);
  void launch(uint64_t seq);

  int dev_;
  std::chrono::nanoseconds window_;
  StreamOwner stream_;
  MappedHostAlloc mem_;  // kSlots slots, then the consumed word
  ArmedSlot* slots_ = nullptr;
  ArmedSlot* slots_dev_ = nullptr;
  volatile uint64_t* consumed_ = nullptr;  // the last seq whose kernel finished reading its slot
  uint64_t* consumed_dev_ = nullptr;
  uint64_t last_ = 0;   // the last seq handed out
  uint64_t armed_ = 0;  // the seq a kernel waits for; 0 when none
  Clock::time_point armed_at_;  // since when it waits (its launch or its previous send's fill)
};

}  // namespace peerlink::gpu
