// NCCL-form send/recv in place: a launch that receives into the very bytes one of its sends reads
// (nccl-tests sendrecv / alltoall in place; torch's in-place exchanges). Both move at once, so a
// peer's chunk could land before this rank's send read those bytes. The recv of such a pair is
// staged (never zero-copy) and each of its chunks waits for a gate that the send opens once it read
// the same chunk (stream_raw_device.h): no copy of the send range first.
#pragma once
#include <cstdint>

#include "transport/stream_launch.h"

namespace peerlink::stream {

// Pairs each RecvRaw op of L with a SendRaw op of L that reads exactly its bytes (same address,
// same length > 0; one send per recv) and marks both kOpGated: the recv's gates are the next free
// ones of its channel's section (mine->gate[buf_id...]), the send's `dst` points at them. Other
// overlaps are left alone (the caller's to avoid; the NCCL shim stages them). Throws
// UnsupportedError when the gated recvs of one channel need more than kGateCap gates. Returns the
// number of pairs.
int gate_in_place(StreamLaunch& L, uint64_t chunk, uint64_t ll_max);

}  // namespace peerlink::stream
