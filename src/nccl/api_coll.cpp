// AllGather, AlltoAll, Gather, Scatter (routing as described in api_ops.cpp).
#include "ops_common.h"

using namespace peerlink;
using namespace peerlink::nccl;

PL_NCCL_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  const char* what = "ncclAllGather";
  if (ncclResult_t r = check_args(comm, what, datatype, -1, INT_MIN, sendcount, {sendbuff, recvbuff})) return r;
  if (empty_collective(comm, what, sendcount)) return ncclSuccess;
  if (comm->route == Route::Hier) {
    const size_t b = sendcount * type_size(datatype);
    return on_hier(comm, what, stream, [=] { return comm->hier->all_gather(sendbuff, recvbuff, b, stream); });
  }
  if (comm->route == Route::Peerlink) {
#if PL_NCCL_USE_PL_ALL_GATHER
    DataType dt;
    const size_t b = sendcount * type_size(datatype);
    const bool p2p = use_p2p_plan(comm, b, sendbuff, b, recvbuff, b * comm->nranks, stream);
    if (!p2p && comm->nranks <= 8 && pl_dtype(datatype, ncclSum, &dt)) {
      say(comm, what, "peerlink all_gather");
      return on_peerlink(comm, what, OpKind::Collective, stream,
                         [=] { all_gather(*comm->pl, sendbuff, recvbuff, sendcount, dt, stream); });
    }
#endif
  }
  if (comm->route == Route::Peerlink && !comm->p2p_forward) {  // the p2p plan
    say(comm, what, "peerlink send/recv");
    size_t b = sendcount * type_size(datatype);
    return on_peerlink(comm, what, OpKind::P2p, stream, [=] {
      char* out = static_cast<char*>(recvbuff);
      for (int q = 0; q < comm->nranks; ++q) {
        if (q == comm->rank) continue;
        p2p_send(comm, q, sendbuff, b, stream);
        p2p_recv(comm, q, out + q * b, b, stream);
      }
      group_copy(comm, out + comm->rank * b, sendbuff, b, stream);
    });
  }
  return forward(comm, what, ncclSum, [=](const RealNccl* r, ncclComm_t rc, ncclRedOp_t) {
    return r->ncclAllGather(sendbuff, recvbuff, sendcount, datatype, rc, stream);
  });
}

PL_NCCL_EXPORT ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                         ncclComm_t comm, cudaStream_t stream) {
  const char* what = "ncclAlltoAll";
  if (ncclResult_t r = check_args(comm, what, datatype, -1, INT_MIN, count, {sendbuff, recvbuff})) return r;
  if (empty_collective(comm, what, count)) return ncclSuccess;
  size_t b = count * type_size(datatype);
  if (comm->route == Route::Hier)
    return on_hier(comm, what, stream, [=] { return comm->hier->all_to_all(sendbuff, recvbuff, b, stream); });
  // In place, a peer's block lands where this rank still reads its own outgoing block: the
  // library's all_to_all orders that itself when sendbuff == recvbuff (peerlink/collectives.h);
  // the p2p plan stages any overlap.
  const bool in_place = overlap(sendbuff, recvbuff, b * comm->nranks);
  if (comm->route == Route::Peerlink && (!in_place || sendbuff == recvbuff)) {
#if PL_NCCL_USE_PL_ALL_TO_ALL
    DataType dt;
    const bool p2p = (sendbuff == recvbuff && swap_by_p2p_plan(comm, b)) ||
                     use_p2p_plan(comm, b, sendbuff, b * comm->nranks, recvbuff, b * comm->nranks, stream);
    if (!p2p && comm->nranks <= 8 && pl_dtype(datatype, ncclSum, &dt)) {
      say(comm, what, in_place ? "peerlink all_to_all (in place)" : "peerlink all_to_all");
      return on_peerlink(comm, what, OpKind::Collective, stream,
                         [=] { all_to_all(*comm->pl, sendbuff, recvbuff, count, dt, stream); });
    }
#endif
  }
  if (comm->route == Route::Peerlink && !comm->p2p_forward) {  // the p2p plan
    say(comm, what, in_place ? "peerlink send/recv (in place)" : "peerlink send/recv");
    // In place, no block may land before it was sent: on a GPU with sendbuff == recvbuff the stream
    // engine orders each exchanged pair of blocks itself; otherwise the group end copies the whole
    // send range to the communicator's stage first and the sends read it through `src` (group.cpp
    // stage_overlapping_sends). The own block then stays where it is.
    auto src = std::make_shared<const void*>(sendbuff);
    Op o = peerlink_op(comm, what, OpKind::P2p, stream, [=] {
      const char* in = static_cast<const char*>(*src);
      char* out = static_cast<char*>(recvbuff);
      for (int q = 0; q < comm->nranks; ++q) {
        if (q == comm->rank) continue;
        p2p_send(comm, q, in + q * b, b, stream);
        p2p_recv(comm, q, out + q * b, b, stream);
      }
      group_copy(comm, out + comm->rank * b, in + comm->rank * b, b, stream);
    });
    if (in_place) {
      o.send_src = static_cast<const char*>(sendbuff);
      o.send_bytes = b * comm->nranks;
      o.recv_dst = static_cast<char*>(recvbuff);
      o.recv_bytes = b * comm->nranks;
      o.stream = stream;
      o.src = src;
    }
    return submit(std::move(o));
  }
  return forward(comm, what, ncclSum, [=](const RealNccl* r, ncclComm_t rc, ncclRedOp_t) {
    return r->ncclAlltoAll(sendbuff, recvbuff, count, datatype, rc, stream);
  });
}

PL_NCCL_EXPORT ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       int root, ncclComm_t comm, cudaStream_t stream) {
  const char* what = "ncclGather";
  if (ncclResult_t r = check_args(comm, what, datatype, -1, root, count, {sendbuff})) return r;
  if (comm->rank == root && count > 0 && !recvbuff) return bad(what, "root's recvbuff is NULL");
  if (comm->route == Route::Hier) {
    const size_t b = count * type_size(datatype);
    return on_hier(comm, what, stream, [=] { return comm->hier->gather(sendbuff, recvbuff, b, root, stream); });
  }
  if (comm->route == Route::Peerlink && !comm->p2p_forward) {
    say(comm, what, "peerlink send/recv");
    size_t b = count * type_size(datatype);
    return on_peerlink(comm, what, OpKind::P2p, stream, [=] {
      if (comm->rank != root) return p2p_send(comm, root, sendbuff, b, stream);
      char* out = static_cast<char*>(recvbuff);
      for (int q = 0; q < comm->nranks; ++q)
        if (q != root) p2p_recv(comm, q, out + q * b, b, stream);
      group_copy(comm, out + root * b, sendbuff, b, stream);
    });
  }
  return forward(comm, what, ncclSum, [=](const RealNccl* r, ncclComm_t rc, ncclRedOp_t) {
    return r->ncclGather(sendbuff, recvbuff, count, datatype, root, rc, stream);
  });
}

PL_NCCL_EXPORT ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                        int root, ncclComm_t comm, cudaStream_t stream) {
  const char* what = "ncclScatter";
  if (ncclResult_t r = check_args(comm, what, datatype, -1, root, count, {recvbuff})) return r;
  if (comm->rank == root && count > 0 && !sendbuff) return bad(what, "root's sendbuff is NULL");
  if (comm->route == Route::Hier) {
    const size_t b = count * type_size(datatype);
    return on_hier(comm, what, stream, [=] { return comm->hier->scatter(sendbuff, recvbuff, b, root, stream); });
  }
  if (comm->route == Route::Peerlink && !comm->p2p_forward) {
    say(comm, what, "peerlink send/recv");
    size_t b = count * type_size(datatype);
    return on_peerlink(comm, what, OpKind::P2p, stream, [=] {
      if (comm->rank != root) return p2p_recv(comm, root, recvbuff, b, stream);
      const char* in = static_cast<const char*>(sendbuff);
      for (int q = 0; q < comm->nranks; ++q)
        if (q != root) p2p_send(comm, q, in + q * b, b, stream);
      group_copy(comm, recvbuff, in + root * b, b, stream);
    });
  }
  return forward(comm, what, ncclSum, [=](const RealNccl* r, ncclComm_t rc, ncclRedOp_t) {
    return r->ncclScatter(sendbuff, recvbuff, count, datatype, root, rc, stream);
  });
}

