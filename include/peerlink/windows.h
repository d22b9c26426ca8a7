// Registered windows: buffers every rank of a communicator registers together, so that later
// collectives on them can write straight into the peers' buffers (no staging through peerlink's
// scratch). The model is NCCL's symmetric windows (ncclCommWindowRegister with
// NCCL_WIN_COLL_SYMMETRIC) and torch's SymmetricMemory.
//
// Contract (as NCCL's): a collective takes the zero-copy path when its recvbuf lies inside a
// registered window of this rank; every rank must then pass a recvbuf inside the window of the same
// id at the same offset (or none may). A violation is detected on the device and reported as
// InvalidArgument on a later call; the data of that call is undefined, but no byte is written
// outside the peers' windows (every write range is checked against the length the peer registered).
// Which collectives use it: all_gather, all_to_all and broadcast, for pieces of at least
// Options::coll_zero_copy_min bytes (PEERLINK_COLL_ZERO_COPY_MIN), or always with
// PEERLINK_<COLLECTIVE>_ALGO=zero_copy; reduce and reduce_scatter read the peers' sendbufs in it
// instead; allreduce needs both sendbuf and recvbuf in windows (4 ranks at 16-64 MB, or
// PEERLINK_ALLREDUCE_ALGO=zero_copy). Inside a CUDA graph capture a collective on buffers in no
// window registers its window buffer by itself (Options::coll_graph_register).
#pragma once
#include <cstddef>
#include <cstdint>

#include "peerlink/communicator.h"

namespace peerlink {

// Collective: every rank calls it, in the same order, with its own range [ptr, ptr+bytes) of memory
// the communicator can export (GPU: any device allocation of its device; host backend: memory from
// Communicator::alloc). Sizes may differ per rank. Returns the window's id (> 0), the same on every
// rank. Memory that some rank cannot export (e.g. host memory from malloc), or that some rank
// cannot map, still registers: the window then never takes the zero-copy path on any rank
// (window_zero_copy() is false; a mapping failure is logged at WARN) and collectives on it run as
// on any buffer. Blocks until every rank registered (bounded by Options::timeout).
// Throws InvalidArgument (null ptr, 0 bytes, a range overlapping a registered window), and what the
// exchange throws (TimeoutError, PeerLostError).
uint64_t register_window(Communicator& comm, void* ptr, size_t bytes);

// Collective in the same sense (no exchange: every rank releases its own mappings). Waits (bounded)
// for this rank's collectives already enqueued to finish, since they may still write the peers'
// windows, then unmaps the peers' ranges. The memory itself stays the caller's. InvalidArgument for
// an id that is not registered.
void deregister_window(Communicator& comm, uint64_t id);

// True when [ptr, ptr+bytes) lies inside a registered window of `comm` that every rank exported.
bool window_zero_copy(Communicator& comm, const void* ptr, size_t bytes);

}  // namespace peerlink
