// Collectives on top of the transport: allreduce, all-gather, reduce-scatter, broadcast, reduce and
// all-to-all(v) across the ranks of one communicator.
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
// Avg: the sum divided by the world size, as ncclAvg and torch's ReduceOp.AVG. Floats multiply the sum
// by 1/world once in their accumulation type (f16/bf16 in f32, then one rounding; exact for a
// power-of-two world size); integers divide the wrapped sum, rounding toward zero.
enum class ReduceOp { Sum, Max, Min, Prod, Avg };

// AllreduceAlgo, parse_allreduce_algo and to_string(AllreduceAlgo) live in options.h (config).

size_t dtype_size(DataType t);
const char* to_string(DataType t);
const char* to_string(ReduceOp op);
// Case-insensitive; accept the usual spellings ("bf16", "bfloat16", "float32", "fp16", "int64", ...).
// InvalidArgument naming the string otherwise.
DataType parse_dtype(const std::string& s);
ReduceOp parse_reduce_op(const std::string& s);          // "sum", "max", "min", "prod"/"product", "avg"/"mean"

// recvbuf[i] = op over ranks 0..n-1 (in that order) of sendbuf[i], for i < count. sendbuf == recvbuf
// is allowed. Every rank gets bit-identical results; f16/bf16 accumulate in f32, integers wrap.
// On GPU communicators the buffers are device memory of the communicator's device (any allocation).
// Throws InvalidArgument (bad arguments, nothing written), TimeoutError / PeerLostError (a previous
// stream-ordered allreduce on this communicator timed out on the device: the communicator's
// collectives are then unusable), UnsupportedError (more than 8 ranks).
void allreduce(Communicator& comm, const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
               ReduceOp op, void* stream = nullptr);

// The algorithm allreduce() uses on `comm` for a message of `bytes` (after the option override) on
// buffers in no window: with sendbuf and recvbuf in zero-copy windows, allreduce() may take
// AllreduceAlgo::ZeroCopy instead (peerlink/windows.h).
AllreduceAlgo allreduce_algo_for(Communicator& comm, size_t bytes);

// Throws the error a stream-ordered allreduce recorded on the device (bounded waits that ran out),
// as PeerLostError when the peer it waited for is dead, else TimeoutError. Call after a stream
// sync to learn whether the allreduces on it succeeded; allreduce() also checks on every call.
void allreduce_check(Communicator& comm);

// ---- the other collectives. Same rules as allreduce: stream-ordered on GPU communicators (device
// memory of the communicator's device, any allocation; graph-capturable, no host synchronization),
// synchronous on host communicators; every rank calls with the same count/dtype/op/root; results
// are bit-identical across ranks (reductions in rank order, f16/bf16 accumulated in f32). Counts
// are elements. Bad arguments throw InvalidArgument naming the values, before anything is written;
// errors of earlier device calls as allreduce (TimeoutError / PeerLostError, then the
// communicator's collectives are unusable); UnsupportedError above 8 ranks.
// The algorithm (LL lines for small messages, chunked push through mapped scratch for larger ones)
// is chosen by size, or forced by Options::<collective>_algo (PEERLINK_<COLLECTIVE>_ALGO).

// recvbuf[r*count + i] = sendbuf of rank r [i]. In place: sendbuf == recvbuf + rank*count.
void all_gather(Communicator& comm, const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                void* stream = nullptr);
// recvbuf[i] = op over ranks of sendbuf[rank*recvcount + i] (sendbuf holds world*recvcount).
// In place: sendbuf + rank*recvcount == recvbuf.
void reduce_scatter(Communicator& comm, const void* sendbuf, void* recvbuf, size_t recvcount, DataType dtype,
                    ReduceOp op, void* stream = nullptr);
// recvbuf = root's sendbuf on every rank (sendbuf is read on root only; may be null elsewhere).
// In place: sendbuf == recvbuf.
void broadcast(Communicator& comm, const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root,
               void* stream = nullptr);
// root's recvbuf = op over ranks of sendbuf (recvbuf is written on root only; may be null elsewhere).
// In place: sendbuf == recvbuf.
void reduce(Communicator& comm, const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op,
            int root, void* stream = nullptr);
// recvbuf[r*count_per_peer + i] = rank r's sendbuf[rank*count_per_peer + i]. In place: sendbuf ==
// recvbuf (as NCCL's alltoall runs it; every rank must then pass it in place).
void all_to_all(Communicator& comm, const void* sendbuf, void* recvbuf, size_t count_per_peer, DataType dtype,
                void* stream = nullptr);
// Rank r's sendbuf[send_displs[q] .. + send_counts[q]) lands in rank q's
// recvbuf[recv_displs[r] .. + recv_counts[r]); arrays of world_size host values (MPI/NCCL semantics),
// read during the call. send_counts[q] on r must equal recv_counts[r] on q (not checkable locally:
// a mismatch delivers wrong data or times out). Send and receive extents must not overlap.
void all_to_all_v(Communicator& comm, const void* sendbuf, const size_t* send_counts, const size_t* send_displs,
                  void* recvbuf, const size_t* recv_counts, const size_t* recv_displs, DataType dtype,
                  void* stream = nullptr);

}  // namespace peerlink
