// The boundary between host code (g++) and the allreduce kernels (.cu, nvcc/hipcc). Host-only
// builds link device_launch_none.cpp instead, which reports UnsupportedError.
#pragma once
#include <cstddef>
#include <cstdint>

#include "collectives/layout.h"

namespace peerlink::coll {

struct LaunchArgs {
  const void* src = nullptr;
  void* dst = nullptr;
  int dtype = 0;     // TypeCode
  int op = 0;        // OpCode
  bool one_shot = true;
  bool ll = false;            // one-shot through LL lines (single step; layout.h)
  size_t ll_words_per_block = 0;  // LL: 8-byte data words per block
  bool ll128 = false;              // one-shot through LL128 lines (single step; layout.h)
  int rank = 0;
  int world = 0;
  int blocks = 1;
  int threads = 512;
  Split split;
  DataLayout layout;
  char* data[kMaxRanks] = {};        // data allocation of every rank, mapped here (own at [rank])
  FlagArea* flags[kMaxRanks] = {};   // flag area of every rank, mapped here
  uint32_t* error = nullptr;         // host-visible error word (mapped pinned host memory)
  uint64_t timeout_ns = 0;
  bool pdl = false;       // launch with programmatic dependent launch (CUDA, sm_90+; device_sync.h)
  bool generic_oneshot = false;  // one-shot through the generic loop even where oneshot_kernels.cu fits
};

// Enqueues the allreduce described by `a` on `stream` (cudaStream_t / hipStream_t). Throws Error
// when the launch fails.
void launch_allreduce(const LaunchArgs& a, void* stream);

}  // namespace peerlink::coll
