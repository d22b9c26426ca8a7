// Collectives and point-to-point: what runs on peerlink, what is forwarded to the real NCCL.
//
// On a peerlink communicator:
//   AllReduce            peerlink::allreduce (f32 f16 bf16 f64 i32 i64; u32/u64 for sum and prod, whose
//                        wrapping arithmetic is bit-identical to the signed one) with sum max min prod
//                        avg; anything else (int8, uint8, fp8, PreMulSum, u32/u64 max/min/avg) forwarded;
//                        on one rank every op but PreMulSum is a copy (AllReduce, Reduce, ReduceScatter)
//   Send / Recv          peerlink's stream-ordered NCCL-form send/recv (any dtype); to itself: a copy
//   Broadcast / Bcast, AllGather, AlltoAll, Reduce, ReduceScatter
//                        peerlink's collectives (switches in ops_common.h) for the dtypes above; broadcast,
//                        all-gather and all-to-all of other dtypes (int8, uint8, fp8) take the p2p
//                        plan below, reduce / reduce-scatter of them are forwarded
//   Gather, Scatter      (api_coll.cpp) peerlink send/recv inside one group, as NCCL itself builds them (any dtype);
//                        the same p2p plan serves broadcast/all-gather/all-to-all when switched off, and
//                        all-gather / all-to-all blocks of Options::nccl_p2p_plan_min bytes and more
//                        (the own block is a send to self: the group's kernel copies it)
//   in-place AlltoAll    the p2p plan; each pair of blocks ordered by the stream engine when
//                        sendbuff == recvbuff on a GPU, else reading a staged copy of the send range
//                        (peerlink's all_to_all is not in place, as NCCL's documents it; nccl-tests
//                        still runs it)
//   any p2p, p2p plan    forwarded when a pair of the communicator has no stream-ordered path
//                        (relay: p2p_forward, set at creation by warm_p2p)
// Forwarded = the real NCCL on a real communicator created lazily (real_comm): never silently wrong.
//
// On a multi-node communicator (Route::Hier): peerlink::HierCommunicator's plans for every op with
// the types and reductions above (two levels, or whole on the inter-node engine; it says which),
// send/recv by peer (peerlink inside the node, the engine between); other types and PreMulSum whole
// on the real NCCL's world communicator.
#include "ops_common.h"

using namespace peerlink;
using namespace peerlink::nccl;

PL_NCCL_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                          ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const char* what = "ncclAllReduce";
  if (ncclResult_t r = check_args(comm, what, datatype, op, INT_MIN, count, {sendbuff, recvbuff})) return r;
  if (empty_collective(comm, what, count)) return ncclSuccess;
  if (one_rank_reduction(comm, what, op))
    return copy_as_collective(comm, what, recvbuff, sendbuff, count * type_size(datatype), stream);
  DataType dt;
  ReduceOp rop;
  if (comm->route == Route::Hier && pl_dtype(datatype, op, &dt) && pl_op(op, &rop))
    return on_hier(comm, what, stream, [=] { return comm->hier->allreduce(sendbuff, recvbuff, count, dt, rop, stream); });
  // peerlink's allreduce serves up to 8 ranks (one node's GPUs; UnsupportedError beyond).
  if (comm->route == Route::Peerlink && comm->nranks <= 8 && pl_dtype(datatype, op, &dt) && pl_op(op, &rop)) {
    say(comm, what, "peerlink allreduce");
    return on_peerlink(comm, what, OpKind::Collective, stream, [=] {
      allreduce(*comm->pl, sendbuff, recvbuff, count, dt, rop, stream);
    });
  }
  return forward(comm, what, op, [=](const RealNccl* r, ncclComm_t rc, ncclRedOp_t rop2) {
    return r->ncclAllReduce(sendbuff, recvbuff, count, datatype, rop2, rc, stream);
  });
}

PL_NCCL_EXPORT ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                     ncclComm_t comm, cudaStream_t stream) {
  const char* what = "ncclSend";
  if (ncclResult_t r = check_args(comm, what, datatype, -1, peer, count, {sendbuff})) return r;
  if (comm->route == Route::Real || comm->p2p_forward)
    return forward(comm, what, ncclSum, [=](const RealNccl* r, ncclComm_t rc, ncclRedOp_t) {
      return r->ncclSend(sendbuff, count, datatype, peer, rc, stream);
    }, OpKind::P2p);
  size_t bytes = count * type_size(datatype);
  auto src = std::make_shared<const void*>(sendbuff);
  Op o;
  if (comm->route == Route::Hier) {
    say(comm, what, same_node(comm, peer) ? "peerlink send (a peer of this node)" : "the inter-node engine's send (a peer on another node)");
    o = peerlink_op(comm, what, OpKind::P2p, stream, [=] { comm->hier->send(peer, *src, bytes, stream); });
  } else {
    say(comm, what, "peerlink send");
    o = peerlink_op(comm, what, OpKind::P2p, stream, [=] { p2p_send(comm, peer, *src, bytes, stream); });
  }
  o.send_src = static_cast<const char*>(sendbuff);
  o.send_bytes = bytes;
  o.stream = stream;
  o.src = src;
  return submit(std::move(o));
}

PL_NCCL_EXPORT ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                     ncclComm_t comm, cudaStream_t stream) {
  const char* what = "ncclRecv";
  if (ncclResult_t r = check_args(comm, what, datatype, -1, peer, count, {recvbuff})) return r;
  if (comm->route == Route::Real || comm->p2p_forward)
    return forward(comm, what, ncclSum, [=](const RealNccl* r, ncclComm_t rc, ncclRedOp_t) {
      return r->ncclRecv(recvbuff, count, datatype, peer, rc, stream);
    }, OpKind::P2p);
  size_t bytes = count * type_size(datatype);
  Op o;
  if (comm->route == Route::Hier) {
    say(comm, what, same_node(comm, peer) ? "peerlink recv (a peer of this node)" : "the inter-node engine's recv (a peer on another node)");
    o = peerlink_op(comm, what, OpKind::P2p, stream, [=] { comm->hier->recv(peer, recvbuff, bytes, stream); });
  } else {
    say(comm, what, "peerlink recv");
    o = peerlink_op(comm, what, OpKind::P2p, stream, [=] { p2p_recv(comm, peer, recvbuff, bytes, stream); });
  }
  o.recv_dst = static_cast<char*>(recvbuff);
  o.recv_bytes = bytes;
  o.stream = stream;
  return submit(std::move(o));
}

PL_NCCL_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                          ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  const char* what = "ncclBroadcast";
  if (ncclResult_t r = check_args(comm, what, datatype, -1, root, count, {recvbuff})) return r;
  if (comm->rank == root && count > 0 && !sendbuff) return bad(what, "root's sendbuff is NULL");
  if (empty_collective(comm, what, count)) return ncclSuccess;
  if (comm->route == Route::Hier) {
    const size_t bytes = count * type_size(datatype);
    return on_hier(comm, what, stream, [=] { return comm->hier->broadcast(sendbuff, recvbuff, bytes, root, stream); });
  }
  if (comm->route == Route::Peerlink) {
#if PL_NCCL_USE_PL_BROADCAST
    DataType dt;
    if (comm->nranks <= 8 && pl_dtype(datatype, ncclSum, &dt)) {  // any dtype of the same size would do: no arithmetic
      say(comm, what, "peerlink broadcast");
      return on_peerlink(comm, what, OpKind::Collective, stream,
                         [=] { broadcast(*comm->pl, sendbuff, recvbuff, count, dt, root, stream); });
    }
#endif
  }
  if (comm->route == Route::Peerlink && !comm->p2p_forward) {  // the p2p plan
    say(comm, what, "peerlink send/recv");
    size_t bytes = count * type_size(datatype);
    return on_peerlink(comm, what, OpKind::P2p, stream, [=] {
      if (comm->rank != root) return p2p_recv(comm, root, recvbuff, bytes, stream);
      for (int q = 0; q < comm->nranks; ++q)
        if (q != root) p2p_send(comm, q, sendbuff, bytes, stream);
      local_copy(comm, recvbuff, sendbuff, bytes, stream);
    });
  }
  return forward(comm, what, ncclSum, [=](const RealNccl* r, ncclComm_t rc, ncclRedOp_t) {
    return r->ncclBroadcast(sendbuff, recvbuff, count, datatype, root, rc, stream);
  });
}

PL_NCCL_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                      cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

PL_NCCL_EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  const char* what = "ncclReduce";
  if (ncclResult_t r = check_args(comm, what, datatype, op, root, count, {sendbuff})) return r;
  if (comm->rank == root && count > 0 && !recvbuff) return bad(what, "root's recvbuff is NULL");
  if (empty_collective(comm, what, count)) return ncclSuccess;
  if (one_rank_reduction(comm, what, op))
    return copy_as_collective(comm, what, recvbuff, sendbuff, count * type_size(datatype), stream);
  DataType dt;
  ReduceOp rop;
  if (comm->route == Route::Hier && pl_dtype(datatype, op, &dt) && pl_op(op, &rop))
    return on_hier(comm, what, stream,
                   [=] { return comm->hier->reduce(sendbuff, recvbuff, count, dt, rop, root, stream); });
#if PL_NCCL_USE_PL_REDUCE
  if (comm->route == Route::Peerlink && comm->nranks <= 8 && pl_dtype(datatype, op, &dt) && pl_op(op, &rop)) {
    say(comm, what, "peerlink reduce");
    return on_peerlink(comm, what, OpKind::Collective, stream,
                       [=] { reduce(*comm->pl, sendbuff, recvbuff, count, dt, rop, root, stream); });
  }
#endif
  return forward(comm, what, op, [=](const RealNccl* r, ncclComm_t rc, ncclRedOp_t rop2) {
    return r->ncclReduce(sendbuff, recvbuff, count, datatype, rop2, root, rc, stream);
  });
}

PL_NCCL_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                              ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                              cudaStream_t stream) {
  const char* what = "ncclReduceScatter";
  if (ncclResult_t r = check_args(comm, what, datatype, op, INT_MIN, recvcount, {sendbuff, recvbuff})) return r;
  if (empty_collective(comm, what, recvcount)) return ncclSuccess;
  if (one_rank_reduction(comm, what, op))
    return copy_as_collective(comm, what, recvbuff, sendbuff, recvcount * type_size(datatype), stream);
  DataType dt;
  ReduceOp rop;
  if (comm->route == Route::Hier && pl_dtype(datatype, op, &dt) && pl_op(op, &rop))
    return on_hier(comm, what, stream,
                   [=] { return comm->hier->reduce_scatter(sendbuff, recvbuff, recvcount, dt, rop, stream); });
#if PL_NCCL_USE_PL_REDUCE_SCATTER
  if (comm->route == Route::Peerlink && comm->nranks <= 8 && pl_dtype(datatype, op, &dt) && pl_op(op, &rop)) {
    say(comm, what, "peerlink reduce_scatter");
    return on_peerlink(comm, what, OpKind::Collective, stream,
                       [=] { reduce_scatter(*comm->pl, sendbuff, recvbuff, recvcount, dt, rop, stream); });
  }
#endif
  return forward(comm, what, op, [=](const RealNccl* r, ncclComm_t rc, ncclRedOp_t rop2) {
    return r->ncclReduceScatter(sendbuff, recvbuff, recvcount, datatype, rop2, rc, stream);
  });
}
