// ArmedLane (armed_lane.h): the host side of the armed small sends. The slots live in mapped host
// memory; the kernels (copy_kernel.cu, armed_send) run in order on the lane's own stream.
#include "gpu/armed_lane.h"

#include <thread>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::gpu {
namespace {

// A kernel gives up by itself only after this: by then the host is gone (the transport cancels an
// idle kernel after its window, far sooner). A fill is only made within a tenth of it.
constexpr std::chrono::seconds kDeadman(10);

// x before seq: a kernel that sees seq in its 16-byte load sees this x with it.
void put(ArmedField& f, uint64_t seq, uint64_t x) {
  f.x = x;
  __atomic_store_n(&f.seq, seq, __ATOMIC_RELEASE);
}

}  // namespace

ArmedLane::ArmedLane(int dev, std::chrono::microseconds window)
    : dev_(dev),
      window_(window),
      stream_(StreamOwner::create(dev)),
      mem_(MappedHostAlloc::create(dev, kSlots * sizeof(ArmedSlot) + 64)) {
  if (window.count() <= 0)
    throw InvalidArgument(common::format("armed send lane: window {} us (must be > 0)", window.count()));
  DeviceGuard g(dev_);
  slots_ = static_cast<ArmedSlot*>(mem_.get());
  slots_dev_ = static_cast<ArmedSlot*>(host_device_pointer(mem_.get()));
  consumed_ = reinterpret_cast<volatile uint64_t*>(slots_ + kSlots);
  consumed_dev_ = reinterpret_cast<uint64_t*>(slots_dev_ + kSlots);
}

ArmedLane::~ArmedLane() {
  try {
    DeviceGuard g(dev_);
    disarm();
    stream_sync(stream_.get());
  } catch (...) {
  }
}

ArmedSlot* ArmedLane::slot_for(uint64_t seq) {
  // Sends are served in order on the lane (one kernel after another, each serving consecutive
  // sends) and each stores its seq in the consumed word after it read its slot, so the slot is free
  // once that word reached seq - kSlots. A lane that stops moving for kDeadman is a stuck device.
  if (seq > kSlots) {
    const auto deadline = Clock::now() + kDeadman;
    while (*consumed_ < seq - kSlots) {
      if (Clock::now() > deadline)
        throw TimeoutError(common::format(
            "armed send lane of device {}: send {} has not left its slot after 10 s (the device does not run the lane)",
            dev_, seq - kSlots));
      std::this_thread::yield();
    }
  }
  return &slots_[seq % kSlots];
}

void ArmedLane::launch(uint64_t seq) {
  launch_armed_send(slots_dev_, seq, uint64_t(std::chrono::nanoseconds(kDeadman).count()),
                    consumed_dev_, stream_.get());
}

void ArmedLane::send(void* dst, const void* src, size_t bytes, void* flag_dev, uint64_t value) {
  if (bytes > kArmedMaxBytes)
    throw InvalidArgument(common::format("armed send of {} bytes (at most {})", bytes, kArmedMaxBytes));
  if (!armed_ || Clock::now() - armed_at_ > kDeadman / 10) {
    // Nothing waits: a plain launch (its arguments in the launch, no slot to read: 10.1 us to the
    // flag against 12.4 for a kernel launched with its slot filled).
    disarm();
    launch_copy_signal(dst, src, bytes, flag_dev, value, stream_.get());
    return;
  }
  const uint64_t seq = armed_;  // == last_: the newest seq handed out
  ArmedField* f = slot_for(seq)->f;
  // The kernel goes on to seq + 1 after this send: armed from now, so a burst's next send needs no
  // launch (8 B, 8 in flight, a launch per send cost 11.7 us per message).
  armed_ = last_ = seq + 1;
  armed_at_ = Clock::now();
  put(f[kArmedSrc], seq, reinterpret_cast<uint64_t>(src));
  put(f[kArmedDst], seq, reinterpret_cast<uint64_t>(dst));
  put(f[kArmedBytes], seq, bytes);
  put(f[kArmedFlag], seq, reinterpret_cast<uint64_t>(flag_dev));
  put(f[kArmedValue], seq, value);
}

void ArmedLane::arm() {
  if (armed_) return;
  const uint64_t next = ++last_;
  launch(next);
  armed_ = next;
  armed_at_ = Clock::now();
}

void ArmedLane::idle(bool all) {
  if (armed_ && (all || Clock::now() - armed_at_ >= window_)) disarm();
}

void ArmedLane::disarm() {
  if (!armed_) return;
  for (ArmedField& f : slot_for(armed_)->f) __atomic_store_n(&f.seq, ~armed_, __ATOMIC_RELEASE);
  armed_ = 0;
}

}  // namespace peerlink::gpu
