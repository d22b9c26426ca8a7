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

}  // namespace

void launch_copy_signal(void* dst, const void* src, size_t bytes, void* flag_device_addr, uint64_t value, Stream s) {
  unsigned threads = bytes >= 16 * 1024 ? 1024 : bytes >= 1024 ? 256 : 64;
  copy_and_signal<<<1, threads, 0, static_cast<rt::Stream>(s)>>>(
      static_cast<char*>(dst), static_cast<const char*>(src), bytes,
      static_cast<unsigned long long*>(flag_device_addr), static_cast<unsigned long long>(value));
  dev::check_launch("copy kernel launch");
}

}  // namespace peerlink::gpu
