// Collectives on top of the transport: allreduce across the ranks of one communicator.
//
// GPU communicators: stream-ordered, runs on the caller's stream (cudaStream_t / hipStream_t passed
// as void*, nullptr = the legacy default stream), never synchronizes the host on the fast path and
// can be captured in a CUDA graph. Host communicators (device -1): synchronous, stream ignored.
// On compute capability >= 9.0 the kernels are launched with programmatic dependent launch
// (PEERLINK_ALLREDUCE_PDL=0 turns it off): an allreduce waits on the device for the preceding
// kernel of its stream, and a following kernel launched with PDL must itself wait
// (cudaGridDependencySynchronize) before it reads the result, as PDL requires of every kernel.
#pragma once
#include <cstddef>
#include <string>

#include "peerlink/communicator.h"

namespace peerlink {

enum class DataType { F32, F16, BF16, F64, I32, I64 };
enum class ReduceOp { Sum, Max, Min, Prod };

// AllreduceAlgo, parse_allreduce_algo and to_string(AllreduceAlgo) live in options.h (config).

size_t dtype_size(DataType t);
const char* to_string(DataType t);
const char* to_string(ReduceOp op);
// Case-insensitive; accept the usual spellings ("bf16", "bfloat16", "float32", "fp16", "int64", ...).
// InvalidArgument naming the string otherwise.
DataType parse_dtype(const std::string& s);
ReduceOp parse_reduce_op(const std::string& s);          // "sum", "max", "min", "prod"/"product"

// recvbuf[i] = op over ranks 0..n-1 (in that order) of sendbuf[i], for i < count. sendbuf == recvbuf
// is allowed. Every rank gets bit-identical results; f16/bf16 accumulate in f32, integers wrap.
// On GPU communicators the buffers are device memory of the communicator's device (any allocation).
// Throws InvalidArgument (bad arguments, nothing written), TimeoutError / PeerLostError (a previous
// stream-ordered allreduce on this communicator timed out on the device: the communicator's
// collectives are then unusable), UnsupportedError (more than 8 ranks).
void allreduce(Communicator& comm, const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
               ReduceOp op, void* stream = nullptr);

// The algorithm allreduce() uses on `comm` for a message of `bytes` (after the option override).
AllreduceAlgo allreduce_algo_for(Communicator& comm, size_t bytes);

// Throws the error a stream-ordered allreduce recorded on the device (bounded waits that ran out),
// as PeerLostError when the peer it waited for is dead, else TimeoutError. Call after a stream
// sync to learn whether the allreduces on it succeeded; allreduce() also checks on every call.
void allreduce_check(Communicator& comm);

}  // namespace peerlink
