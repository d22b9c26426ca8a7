// NCCL-form send/recv in place: a launch that receives into the very bytes one of its sends reads
// (nccl-tests sendrecv / alltoall in place; torch's in-place exchanges). Both move at once, so a
// peer's bytes could land before this rank's send read them. Two ways, both without a copy of the
// send range first:
//   - zero-copy (kOpGateZc; a recv the peer's GPU writes directly, stream_swap_device.h): the recv
//     posts its buffer "gated"; the send opens a gate in the writer's area per 32 KB unit it read,
//     and the writer stores each unit only once its gate is open;
//   - staged (kOpGated; everything else, e.g. between processes): the recv is staged and each of its
//     chunks waits for a gate in this rank's area that the send opens once it read the chunk
//     (stream_raw_device.h).
#pragma once
#include <cstdint>

#include "stream/stream_launch.h"

namespace peerlink::stream {

// Pairs each RecvRaw op of L with a SendRaw op of L that reads exactly its bytes (same address,
// same length > 0; one send per recv) and marks both (stream_launch.h: kOpGateZc or kOpGated). Gates
// of one recv channel follow each other (staged: mine->gate[buf_id...], zero-copy:
// remote->swap_gate[buf_id...]; beyond kSwapGateCap units a pair is staged). Other overlaps are
// left alone (the caller's to avoid; the NCCL shim stages them). Needs L.direct_min /
// direct_ipc_min set. Throws UnsupportedError when the staged gated recvs of one channel need more
// than kGateCap gates. Returns the number of pairs.
int gate_in_place(StreamLaunch& L, uint64_t chunk, uint64_t ll_max);

}  // namespace peerlink::stream
