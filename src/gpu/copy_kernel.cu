// Small-message copy that signals completion itself: one block copies the payload (16-byte words
// when both ends are aligned), every thread fences its stores at system scope, then one thread
// stores the completion value into host-mapped memory. This replaces "copy engine + stream write"
// for small sends, where the copy engine's start-up latency dominates.
#include <cstdint>

#include "gpu/device.h"
#include "gpu/runtime.h"

namespace peerlink::gpu {
namespace {

__global__ void copy_and_signal(char* dst, const char* src, size_t bytes, unsigned long long* flag,
                                unsigned long long value) {
  const bool aligned = ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0;
  size_t done = 0;
  if (aligned) {
    size_t words = bytes / 16;
    auto* d = reinterpret_cast<uint4*>(dst);
    auto* s = reinterpret_cast<const uint4*>(src);
    for (size_t i = threadIdx.x; i < words; i += blockDim.x) d[i] = s[i];
    done = words * 16;
  }
  for (size_t i = done + threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
  dev::fence_system();  // this thread's stores reach the peer before the signal
  __syncthreads();
  if (threadIdx.x == 0) *reinterpret_cast<volatile unsigned long long*>(flag) = value;
}

// Sends armed before their messages (runtime.h, launch_armed_send). Thread i < kArmedFields polls
// field i with one 16-byte load per look ({seq, value} arrive together: a 16-byte PCIe read of
// one line is one snapshot), so the fields cost one host-memory latency, not five in a row (five
// volatile 8-byte reads after the doorbell measured 3.3-3.7 us on 2x H100;
// the whole armed send from the host's fill to its flag 4.4 us). After a send the kernel
// goes on to the next slot, so a burst costs no launch per message.
__global__ void __launch_bounds__(256) armed_send(ArmedSlot* slots, unsigned long long first_seq,
                                                  unsigned long long deadman_ns, unsigned long long* consumed) {
  __shared__ unsigned long long field[kArmedFields];
  __shared__ int give_up;
  const int i = threadIdx.x;
  for (unsigned long long seq = first_seq;; ++seq) {
    ArmedSlot* slot = &slots[seq % kArmedSlots];
    if (i == 0) give_up = 0;
    __syncthreads();  // also: the previous send's fields are no longer read
    if (i < kArmedFields) {
      const uint64_t t0 = dev::now_ns();
      for (bool last = false;;) {
        uint32_t s0, s1, x0, x1;  // HIP: two 8-byte loads, seq first, x after (the host writes x first)
        dev::load_volatile_16(&slot->f[i], s0, s1, x0, x1);
        const unsigned long long s = (uint64_t(s1) << 32) | s0, x = (uint64_t(x1) << 32) | x0;
        if (s == seq) {
          field[i] = x;
          break;
        }
        if (s == ~seq || last) {  // cancelled, or the host went away
          give_up = 1;
          break;
        }
        last = dev::now_ns() - t0 > deadman_ns;  // one more look after it
      }
    }
    __syncthreads();
    if (give_up) {
      if (i == 0) *reinterpret_cast<volatile unsigned long long*>(consumed) = seq;
      return;
    }
    char* dst = reinterpret_cast<char*>(field[kArmedDst]);
    const char* src = reinterpret_cast<const char*>(field[kArmedSrc]);
    const size_t bytes = field[kArmedBytes] < kArmedMaxBytes ? field[kArmedBytes] : kArmedMaxBytes;
    size_t done = 0;
    if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
      for (size_t k = i; k < bytes / 16; k += blockDim.x)
        reinterpret_cast<uint4*>(dst)[k] = reinterpret_cast<const uint4*>(src)[k];
      done = bytes / 16 * 16;
    }
    for (size_t k = done + i; k < bytes; k += blockDim.x) dst[k] = src[k];
    dev::fence_system();  // this thread's stores reach the peer before the signal
    __syncthreads();
    if (i == 0) {
      *reinterpret_cast<volatile unsigned long long*>(field[kArmedFlag]) = field[kArmedValue];
      *reinterpret_cast<volatile unsigned long long*>(consumed) = seq;
    }
  }
}

}  // namespace

void launch_armed_send(ArmedSlot* slots_dev, uint64_t first_seq, uint64_t deadman_ns, uint64_t* consumed_dev,
                       Stream s) {
  armed_send<<<1, 256, 0, static_cast<rt::Stream>(s)>>>(slots_dev, static_cast<unsigned long long>(first_seq),
                                                        static_cast<unsigned long long>(deadman_ns),
                                                        reinterpret_cast<unsigned long long*>(consumed_dev));
  dev::check_launch("armed send kernel launch");
}

void launch_copy_signal(void* dst, const void* src, size_t bytes, void* flag_device_addr, uint64_t value, Stream s) {
  unsigned threads = bytes >= 16 * 1024 ? 1024 : bytes >= 1024 ? 256 : 64;
  copy_and_signal<<<1, threads, 0, static_cast<rt::Stream>(s)>>>(
      static_cast<char*>(dst), static_cast<const char*>(src), bytes,
      static_cast<unsigned long long*>(flag_device_addr), static_cast<unsigned long long>(value));
  dev::check_launch("copy kernel launch");
}

}  // namespace peerlink::gpu
