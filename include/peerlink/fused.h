// The tensor-parallel epilogue of a decoder layer in one pass: allreduce of the layer's partial
// output, residual add and RMSNorm (and, in the FP8 form, the static per-tensor quantization for the
// next FP8 GEMM), across the ranks of one communicator.
//
// Semantics (f32 math, one rounding per output; x_r = rank r's input, T = dtype):
//   s            = x_0 + x_1 + ... + x_{n-1}                  (f32, summed in rank order)
//   residual_out = round_T(s + residual_in)
//   norm_out     = round_T(residual_out · inv · (weight_bias + weight)),
//                  inv = 1 / sqrt(sum over the row of residual_out² / hidden + eps)     (f32)
//   quant_out    = e4m3(norm_out / *scale)                    (FP8 form; f32 division)
// The norm reads the *rounded* residual_out, as vLLM's fused_add_rms_norm, FlashInfer's
// allreduce_fusion and TensorRT-LLM's RESIDUAL_RMS_NORM do: the next layer's residual and this
// layer's norm input are then the same numbers. Rows are `hidden` contiguous elements; `tokens`
// rows follow each other. e4m3 is OCP FP8 E4M3 ("fn": torch.float8_e4m3fn), rounded to nearest
// even, saturated to +-448 (infinities too); NaN stays NaN.
//
// Every rank passes the same tokens, hidden, dtype, eps, weight_bias (and the same weight, as
// tensor parallelism replicates it) and gets bit-identical outputs; runs repeat bit for bit.
// In place is allowed: norm_out == input and/or residual_out == residual_in. Any other overlap
// between an output and another buffer is InvalidArgument.
//
// Limits (InvalidArgument naming the values, nothing written): dtype F32, F16 or BF16, weight in
// the same dtype; hidden a positive multiple of one 16-byte vector (8 elements of F16/BF16, 4 of
// F32) and at most kFusedMaxRowBytes per row (16384 F16/BF16, 8192 F32 elements); one row must fit
// a scratch position (Options::allreduce_scratch_bytes); every buffer 16-byte aligned (scale 4);
// no null buffer when tokens > 0 (norm_out may be null in the FP8 form); at most 8 ranks
// (UnsupportedError above). tokens == 0 writes nothing.
//
// GPU communicators: buffers in device memory of the communicator's device; stream-ordered on
// `stream` (cudaStream_t / hipStream_t as void*), no host synchronization, capturable in a CUDA
// graph, launched with programmatic dependent launch as allreduce (peerlink/collectives.h says what
// a following PDL kernel must do). Errors of earlier device calls are reported as allreduce reports
// them (TimeoutError / PeerLostError; allreduce_check). Host communicators (device -1): host memory,
// synchronous, stream ignored. A one-rank communicator runs add_rmsnorm().
// Algorithm: one-shot through LL / LL128 lines or the flag-based scratch for small and medium
// token counts, two-shot (reduce-scatter by rows, norm, all-gather) for large ones on 3+ ranks; by
// size, or forced by Options::fused_algo (PEERLINK_FUSED_ALGO=oneshot|twoshot).
#pragma once
#include <cstddef>

#include "peerlink/collectives.h"
#include "peerlink/communicator.h"

namespace peerlink {

// Bytes of one row (hidden * element size) the fused epilogue accepts.
constexpr size_t kFusedMaxRowBytes = size_t(32) << 10;

void allreduce_add_rmsnorm(Communicator& comm, const void* input, const void* residual_in, const void* weight,
                           void* norm_out, void* residual_out, size_t tokens, size_t hidden, DataType dtype,
                           float eps, float weight_bias = 0.f, void* stream = nullptr);

// As allreduce_add_rmsnorm, and quant_out (tokens * hidden bytes of e4m3) = e4m3(norm_out / *scale),
// with `scale` a device float of the communicator's device (a host float on the host backend), read
// on the stream when the call runs (a graph replay reads its current value). norm_out may be null:
// then only residual_out and quant_out are written (vLLM's fused_add_rms_norm_static_fp8_quant).
void allreduce_add_rmsnorm_fp8(Communicator& comm, const void* input, const void* residual_in, const void* weight,
                               void* norm_out, void* residual_out, void* quant_out, const float* scale,
                               size_t tokens, size_t hidden, DataType dtype, float eps, float weight_bias = 0.f,
                               void* stream = nullptr);

// The epilogue without the allreduce, on one device (kHostDevice: host memory, synchronous):
// residual_out = round(input + residual_in), norm_out as above, the same limits (no scratch bound).
// What a one-rank communicator runs, and the second half of the unfused sequence (allreduce, then
// this) that the fused call replaces. Stream-ordered and capturable on a GPU; plain launch.
void add_rmsnorm(int device, const void* input, const void* residual_in, const void* weight, void* norm_out,
                 void* residual_out, size_t tokens, size_t hidden, DataType dtype, float eps,
                 float weight_bias = 0.f, void* stream = nullptr);

}  // namespace peerlink
