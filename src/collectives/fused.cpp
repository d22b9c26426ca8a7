// allreduce_add_rmsnorm(_fp8) and add_rmsnorm (peerlink/fused.h): argument checks (nothing is written
// before they pass), the data path and grid (fused_plan.h), and dispatch to the host backend or the
// kernels. Stream ordering, the error word and the broken state are the allreduce's (allreduce.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "collectives/coll_state.h"
#include "collectives/fused_call.h"
#include "collectives/fused_plan.h"
#include "common/format.h"
#include "gpu/owners.h"
#include "gpu/runtime.h"
#include "peerlink/errors.h"
#include "peerlink/fused.h"
#include "transport/services.h"

namespace peerlink {
namespace {

using coll::FusedCall;
using common::format;

// One buffer of a call, for the checks: name, address, bytes, whether the call writes it.
struct Buffer {
  const char* name;
  const void* p;
  size_t bytes;
  bool output;
};

bool overlap(const Buffer& a, const Buffer& b) {
  const auto x = reinterpret_cast<uintptr_t>(a.p), y = reinterpret_cast<uintptr_t>(b.p);
  return a.p && b.p && a.bytes && b.bytes && x < y + b.bytes && y < x + a.bytes;
}

// Shapes, dtype, eps, then buffers: null, alignment, overlaps (the two in-place forms allowed). The
// bound of a row by the scratch position needs the communicator's state (run()).
void check_call(const FusedCall& c, DataType dtype, bool fp8) {
  if (dtype != DataType::F32 && dtype != DataType::F16 && dtype != DataType::BF16)
    throw InvalidArgument(format("{}: dtype {} is not one of f32, f16, bf16 (the weight has the same dtype)", c.name,
                                 to_string(dtype)));
  const size_t elem = dtype_size(dtype), vec = 16 / elem;
  if (c.hidden == 0 || c.hidden % vec != 0)
    throw InvalidArgument(format("{}: hidden {} is not a positive multiple of {} ({} elements of {} make the kernels' "
                                 "16-byte vectors)", c.name, c.hidden, vec, vec, to_string(dtype)));
  if (c.hidden > kFusedMaxRowBytes / elem)
    throw InvalidArgument(format("{}: hidden {} exceeds {} elements of {} ({} bytes per row)", c.name, c.hidden,
                                 kFusedMaxRowBytes / elem, to_string(dtype), kFusedMaxRowBytes));
  if (c.tokens > SIZE_MAX / (c.hidden * elem))
    throw InvalidArgument(format("{}: tokens {} x hidden {} overflows", c.name, c.tokens, c.hidden));
  if (!std::isfinite(c.eps) || c.eps < 0.f || !std::isfinite(c.weight_bias))
    throw InvalidArgument(format("{}: eps {} must be finite and >= 0, weight_bias {} finite", c.name, c.eps,
                                 c.weight_bias));
  if (c.tokens == 0) return;
  const size_t bytes = c.tokens * c.hidden * elem;
  enum { kIn, kRes, kWeight, kScale, kNorm, kResOut, kQuant, kCount };
  const Buffer bufs[kCount] = {{"input", c.input, bytes, false},
                               {"residual_in", c.residual_in, bytes, false},
                               {"weight", c.weight, c.hidden * elem, false},
                               {"scale", c.scale, fp8 ? sizeof(float) : 0, false},
                               {"norm_out", c.norm_out, bytes, true},
                               {"residual_out", c.residual_out, bytes, true},
                               {"quant_out", c.quant_out, fp8 ? c.tokens * c.hidden : 0, true}};
  for (int i = 0; i < kCount; ++i) {
    const Buffer& b = bufs[i];
    if (!b.bytes || (!b.p && fp8 && i == kNorm)) continue;  // not part of this form, or the FP8 form's null norm_out
    if (!b.p) throw InvalidArgument(format("{}: {} is null for {} tokens x {} hidden", c.name, b.name, c.tokens, c.hidden));
    const uintptr_t align = i == kScale ? alignof(float) : 16;
    if (reinterpret_cast<uintptr_t>(b.p) % align != 0)
      throw InvalidArgument(format("{}: {} {} is not {}-byte aligned", c.name, b.name, b.p, align));
  }
  // Every output against every other buffer (each pair of outputs once); the in-place forms are the
  // same address exactly.
  for (int o = kNorm; o < kCount; ++o)
    for (int i = 0; i < kCount; ++i) {
      if (i == o || (bufs[i].output && i < o) || !overlap(bufs[o], bufs[i])) continue;
      const bool in_place = bufs[o].p == bufs[i].p && ((o == kNorm && i == kIn) || (o == kResOut && i == kRes));
      if (in_place) continue;
      throw InvalidArgument(format("{}: {} {} and {} {} overlap ({} and {} bytes); in place means norm_out == input "
                                   "and/or residual_out == residual_in exactly",
                                   c.name, bufs[o].name, bufs[o].p, bufs[i].name, bufs[i].p, bufs[o].bytes,
                                   bufs[i].bytes));
    }
}

FusedCall make_call(const char* name, const void* input, const void* residual_in, const void* weight, void* norm_out,
                    void* residual_out, size_t tokens, size_t hidden, DataType dtype, float eps, float weight_bias) {
  FusedCall c;
  c.name = name;
  c.input = input;
  c.residual_in = residual_in;
  c.weight = weight;
  c.norm_out = norm_out;
  c.residual_out = residual_out;
  c.tokens = tokens;
  c.hidden = hidden;
  c.dtype = static_cast<int>(dtype);
  c.eps = eps;
  c.weight_bias = weight_bias;
  return c;
}

// The kernel arguments every path shares.
coll::FusedArgs kernel_args(const FusedCall& c) {
  coll::FusedArgs f;
  f.a.src = c.input;
  f.a.dtype = c.dtype;
  f.residual_in = c.residual_in;
  f.weight = c.weight;
  f.norm_out = c.norm_out;
  f.residual_out = c.residual_out;
  f.quant_out = c.quant_out;
  f.scale = c.scale;
  f.tokens = c.tokens;
  f.hidden = c.hidden;
  f.eps = c.eps;
  f.weight_bias = c.weight_bias;
  return f;
}

// The epilogue alone on `device` (one rank, add_rmsnorm). A plain launch (no PDL): its grid covers
// the rows (up to 65535 blocks, then a loop), one block per row as in the fused kernels.
void run_local(int device, const FusedCall& c, void* stream) {
  if (c.tokens == 0) return;
  if (device == kHostDevice) return coll::host_fused_local(c);
  gpu::DeviceGuard dg(device);
  coll::FusedArgs f = kernel_args(c);
  const coll::FusedGeometry g = coll::fused_unit_geometry(c.hidden / (16 / dtype_size(static_cast<DataType>(c.dtype))));
  f.path = coll::kFusedLocal;
  f.a.threads = g.threads;
  f.slots = g.slots;
  f.a.blocks = static_cast<int>(std::min<size_t>(c.tokens, 65535));
  coll::launch_fused(f, stream);
}

void run(Communicator& comm, FusedCall& c, void* stream) {
  detail::CommServices& svc = detail::services(comm);
  auto call = svc.begin(c.name);  // close() waits for us
  if (comm.world_size() == 1) return run_local(comm.device(), c, stream);
  coll::CollState& st = coll::coll_state(comm);
  auto calls = st.lock_calls();
  coll::check_collective_error(st);
  const size_t row_bytes = c.hidden * dtype_size(static_cast<DataType>(c.dtype));
  if (row_bytes > st.layout().cap)
    throw InvalidArgument(format("{}: a row of {} bytes (hidden {}) exceeds the scratch position of {} bytes "
                                 "(Options::allreduce_scratch_bytes)", c.name, row_bytes, c.hidden, st.layout().cap));
  if (c.tokens == 0) return;
  coll::run_fused(st, c, kernel_args(c), stream);
}

}  // namespace

void allreduce_add_rmsnorm(Communicator& comm, const void* input, const void* residual_in, const void* weight,
                           void* norm_out, void* residual_out, size_t tokens, size_t hidden, DataType dtype,
                           float eps, float weight_bias, void* stream) {
  FusedCall c = make_call("allreduce_add_rmsnorm", input, residual_in, weight, norm_out, residual_out, tokens, hidden,
                          dtype, eps, weight_bias);
  check_call(c, dtype, false);
  run(comm, c, stream);
}

void allreduce_add_rmsnorm_fp8(Communicator& comm, const void* input, const void* residual_in, const void* weight,
                               void* norm_out, void* residual_out, void* quant_out, const float* scale, size_t tokens,
                               size_t hidden, DataType dtype, float eps, float weight_bias, void* stream) {
  FusedCall c = make_call("allreduce_add_rmsnorm_fp8", input, residual_in, weight, norm_out, residual_out, tokens,
                          hidden, dtype, eps, weight_bias);
  c.quant_out = quant_out;
  c.scale = scale;
  check_call(c, dtype, true);
  run(comm, c, stream);
}

void add_rmsnorm(int device, const void* input, const void* residual_in, const void* weight, void* norm_out,
                 void* residual_out, size_t tokens, size_t hidden, DataType dtype, float eps, float weight_bias,
                 void* stream) {
  FusedCall c = make_call("add_rmsnorm", input, residual_in, weight, norm_out, residual_out, tokens, hidden, dtype,
                          eps, weight_bias);
  check_call(c, dtype, false);
  if (device < kHostDevice) throw InvalidArgument(format("add_rmsnorm: device {} (kHostDevice is -1)", device));
  run_local(device, c, stream);
}

}  // namespace peerlink
