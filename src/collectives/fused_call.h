// One call of the fused allreduce + residual add + RMSNorm as the host code sees it (fused.cpp
// checks it, host_fused.cpp runs it on the host backend, fused_plan.h's FusedArgs carries it to the
// kernels).
#pragma once
#include <cstddef>

namespace peerlink::coll {

struct CollState;
struct FusedArgs;

struct FusedCall {
  const char* name = "allreduce_add_rmsnorm";
  const void* input = nullptr;
  const void* residual_in = nullptr;
  const void* weight = nullptr;
  void* norm_out = nullptr;      // may be null in the FP8 form
  void* residual_out = nullptr;
  void* quant_out = nullptr;     // FP8 form: tokens * hidden e4m3 bytes; else null
  const float* scale = nullptr;  // FP8 form
  size_t tokens = 0, hidden = 0;
  int dtype = 0;  // TypeCode: kF32, kF16 or kBF16
  float eps = 0.f, weight_bias = 0.f;
};

// fused_choice.cpp: the path and grid of a call on st's communicator, then the host backend's data
// flow or the kernel launch (f: the call's kernel arguments, fused.cpp's kernel_args). Arguments
// checked, tokens > 0, a row fits a scratch position; caller holds st.mu.
void run_fused(CollState& st, const FusedCall& c, FusedArgs f, void* stream);
// Host backend (synchronous, SHM scratch, one "block"): the OneShot or TwoShot data flow of
// fused_kernels.cu with st.host_seq's sequence numbers. Caller holds st.mu; tokens > 0.
void host_fused(CollState& st, const FusedCall& c, bool two_shot);
// Host memory, no peers: the epilogue on the input alone (add_rmsnorm, one-rank communicators).
void host_fused_local(const FusedCall& c);

}  // namespace peerlink::coll
