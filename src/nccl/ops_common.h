// Helpers of the op entry points (api_ops.cpp, api_coll.cpp): argument checks, logging of the path
// taken, dtype/op mapping to peerlink, forwarding to the real NCCL, peerlink ops as group ops, and
// send/recv with this rank itself.
#pragma once
#include <climits>
#include <initializer_list>
#include <memory>
#include <string>

#include "real_nccl.h"
#include "shim.h"

// ==== peerlink's own collectives (include/peerlink/collectives.h), ONE LINE PER OP ====
// 1 = call peerlink's collective (up to 8 ranks, the dtypes of pl_dtype; otherwise the p2p plan or
// the real NCCL as described above); 0 = the p2p plan (broadcast, all-gather, all-to-all) or
// forwarding (reduce, reduce-scatter) only.
#define PL_NCCL_USE_PL_ALL_GATHER 1
#define PL_NCCL_USE_PL_REDUCE_SCATTER 1
#define PL_NCCL_USE_PL_BROADCAST 1
#define PL_NCCL_USE_PL_REDUCE 1
#define PL_NCCL_USE_PL_ALL_TO_ALL 1
// ===================================================================================================

namespace peerlink::nccl {

size_t type_size(ncclDataType_t t);
bool pl_op(ncclRedOp_t op, ReduceOp* out);
// The peerlink dtype for an arithmetic op, or false (forward).
bool pl_dtype(ncclDataType_t t, ncclRedOp_t op, DataType* out);
ncclResult_t bad(const char* what, const std::string& msg);
// Common argument checks of every op (NCCL's own checks: comm, dtype, op, root/peer, pointers);
// op < 0: no reduction op; root INT_MIN: no root/peer.
ncclResult_t check_args(ncclComm* c, const char* what, ncclDataType_t t, int op, int root, size_t count,
                        std::initializer_list<const void*> bufs);
// Says at INFO which path `what` took on `c` (once per (op, path); every op at TRACE).
void say(ncclComm* c, const char* what, const char* path);
// True for a collective of count 0 on a peerlink communicator (said at INFO): the caller returns
// ncclSuccess with nothing enqueued, in a group or not, as NCCL drops an empty collective after its
// argument checks (enqueue.cc); forwarding one would create the real communicator for nothing.
// Not for Send/Recv (an empty p2p op still matches its peer's) nor Gather/Scatter (built of them).
bool empty_collective(ncclComm* c, const char* what, size_t count);
// True (and said at INFO) when a reduction with `op` on `c` is a copy: a peerlink communicator of
// one rank and any op but a PreMulSum.
bool one_rank_reduction(ncclComm* c, const char* what, ncclRedOp_t op);
// A copy of `bytes` from src to dst enqueued as one of c's collectives (stream-ordered, in group
// order): the one-rank reductions.
ncclResult_t copy_as_collective(ncclComm* c, const char* what, void* dst, const void* src, size_t bytes, void* stream);

// A PreMulSum placeholder's record copied when the op is called (the program may destroy the
// placeholder before ncclGroupEnd); null for the built-in ops and on real communicators.
std::shared_ptr<const ncclComm::PreMul> premul_of(ncclComm* c, ncclRedOp_t op);
// Runs `call` with the real op for `op`: a PreMulSum is created on the real communicator `rc`
// around the call and destroyed right after (NCCL allows destroying it once the op was called).
ncclResult_t with_real_op(ncclComm* c, ncclComm_t rc, ncclRedOp_t op, const ncclComm::PreMul* pm,
                          const std::function<ncclResult_t(ncclRedOp_t)>& call);

// Queues `call(real, real_comm, real_op)` as a forwarded op of `c`. Forwarded send/recv pass
// OpKind::P2p: group end issues them inside one real NCCL group (group.cpp), as NCCL requires of
// a rank's sends and receives that depend on each other.
template <class F>
ncclResult_t forward(ncclComm* c, const char* what, ncclRedOp_t op, F call, OpKind kind = OpKind::Collective) {
  say(c, what,
      c->route == Route::Real   ? "real NCCL (communicator routed there)"
      : c->route == Route::Hier ? "real NCCL (whole on the world communicator between nodes: a type or op peerlink does not run)"
                                : "real NCCL (forwarded)");
  std::shared_ptr<const ncclComm::PreMul> pm = premul_of(c, op);
  if (c->route != Route::Real && op >= ncclNumOps && !pm)
    return bad(what, "reduction op " + std::to_string(static_cast<int>(op)) + " is not one of this communicator's");
  Op o;
  o.comm = c;
  o.kind = kind;
  o.run = [c, what, op, pm, call]() -> ncclResult_t {
    ncclComm_t rc = c->route == Route::Real ? c->real : real_comm(c, what);
    if (!rc) return ncclInvalidUsage;
    const RealNccl* real = real_nccl(c->opts.nccl_library);
    return with_real_op(c, rc, op, pm.get(), [&](ncclRedOp_t rop) { return call(real, rc, rop); });
  };
  return submit(std::move(o));
}

// A peerlink call on `stream` as an op; exceptions become the NCCL code and the last error.
template <class F>
Op peerlink_op(ncclComm* c, const char* what, OpKind kind, void* stream, F call) {
  Op o;
  o.comm = c;
  o.kind = kind;
  o.on_peerlink = true;
  o.stream = stream;
  o.run = [c, what, kind, call]() -> ncclResult_t {
    try {
      if (kind == OpKind::Collective && !c->used_collectives && c->device >= 0) {
        // The communicator's first collective sets up its scratch (allocation, exchange, mapping):
        // legal even when the program captures it in global mode (nccl-tests and torch warm up
        // eagerly first, a program need not).
        device::RelaxedCaptureScope relaxed;
        call();
      } else {
        call();
      }
      if (kind == OpKind::Collective) c->used_collectives = true;
      return ncclSuccess;
    } catch (const std::exception& e) {
      set_last_error(std::string(what) + ": " + e.what());
      ncclResult_t r = result_of(e);
      if (r == ncclRemoteError) c->async_error.store(r);
      return r;
    }
  };
  return o;
}

template <class F>
ncclResult_t on_peerlink(ncclComm* c, const char* what, OpKind kind, void* stream, F call) {
  return submit(peerlink_op(c, what, kind, stream, call));
}

// A call of a multi-node communicator (peerlink::HierCommunicator), which returns the path it
// took: said at INFO once per op and path, like every other path.
template <class F>
ncclResult_t on_hier(ncclComm* c, const char* what, void* stream, F call) {
  return on_peerlink(c, what, OpKind::Collective, stream, [=] { say(c, what, call()); });
}

// ncclAllGather / ncclAlltoAll: send/recv instead of the collective for blocks of `block` bytes per
// peer (Options::nccl_p2p_plan_min), unless both buffers are in registered windows or the call is
// being captured and the collective will register its buffer itself (Options::coll_graph_register).
bool use_p2p_plan(ncclComm* c, size_t block, const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
                  void* stream);
// ncclAlltoAll with sendbuff == recvbuff: the p2p plan instead of the collective when each block
// goes the stream engine's in-place zero-copy exchange (Options::stream_direct_min; every peer a
// rank of this process: stream/stream_gate.h), which beats the collective's window swap.
bool swap_by_p2p_plan(ncclComm* c, size_t block);
// A stream-ordered local copy (host backend: memcpy).
void local_copy(ncclComm* c, void* dst, const void* src, size_t bytes, void* stream);
// The same inside the batch's peerlink group: a send + recv to this rank itself, which the group's
// kernel copies beside its other messages instead of before them (gather / scatter / alltoall's own
// piece: 256 MB gather out of place on 2x H200, one process: 439 us with the copy before the kernel
// against 373 in place).
void group_copy(ncclComm* c, void* dst, const void* src, size_t bytes, void* stream);
// Send/recv of `c` with `peer`, inside the batch's peerlink group; to itself: matched FIFO here.
void p2p_send(ncclComm* c, int peer, const void* buf, size_t bytes, void* stream);
void p2p_recv(ncclComm* c, int peer, void* buf, size_t bytes, void* stream);
bool overlap(const void* a, const void* b, size_t bytes);
// A multi-node communicator's peer on this rank's node.
inline bool same_node(const ncclComm* c, int peer) { return c->hier->map().node_of(peer) == c->hier->map().node_of(c->rank); }

}  // namespace peerlink::nccl
