// What the host side of the stream engine (stream_gpu.cpp) hands to the kernels
// (stream_kernels.cu): one launch per (batch, stream), one block per channel — a (peer, kind) pair
// of this rank — so every FIFO channel is driven by exactly one block (it alone reads and advances
// the channel's device-resident counters: no cross-block race, and a graph replay continues from
// whatever the counters say). The channels of one launch progress concurrently, which is what makes
// a group deadlock-free (a send waiting for its posted recv never blocks a recv of the same launch).
// Passed by value as the kernel parameter (< 4 KB), so nothing is copied to the device at enqueue
// and a captured launch carries everything it needs except the counters.
#pragma once
#include <cstddef>
#include <cstdint>

#include "transport/stream_layout.h"

namespace peerlink::stream {

constexpr int kMaxLaunchOps = 48;
constexpr int kMaxLaunchChannels = 56;  // all pairs of 8 ranks, both forms, both directions

// Error word (host-mapped, written by the kernels, read by the next host call): code | peer << 8.
constexpr uint32_t kErrTimeout = 1;    // a wait ran past Options::timeout (peer dead or stalled)
constexpr uint32_t kErrMismatch = 2;   // matched calls disagreed on (buffer, offset, len): nothing written
constexpr uint32_t kErrProtocol = 3;   // a peer's descriptor or chunk header made no sense

struct DevOp {
  const char* src;
  char* dst;       // SendPub: mapped destination; RecvRaw: user buffer
  uint64_t len;
  uint64_t offset;
  uint32_t buf_id;
  uint32_t pad;
};

struct DevChannel {
  int32_t kind;      // StreamOpKind
  int32_t peer;
  int32_t first_op;  // ops[first_op, first_op + nops) in call order
  int32_t nops;
  PairSection* mine;    // this rank's section for `peer`
  PairSection* remote;  // section `rank` of the peer's area, mapped here
};

struct StreamLaunch {
  DevOp ops[kMaxLaunchOps];
  DevChannel ch[kMaxLaunchChannels];
  int32_t nch;
  uint32_t slots;
  uint64_t chunk;
  uint64_t timeout_ns;
  uint32_t* error;  // host-mapped
};
static_assert(sizeof(StreamLaunch) <= 4000, "kernel parameter limit");

// Launches the batch on `stream` (cudaStream_t / hipStream_t). Throws GpuError/Error on a launch error.
void launch_stream_batch(const StreamLaunch& l, void* stream);

}  // namespace peerlink::stream
