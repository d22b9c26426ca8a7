// Collectives and point-to-point: what runs on peerlink, what is forwarded to the real NCCL.
//
// On a peerlink communicator:
//   AllReduce            peerlink::allreduce (f32 f16 bf16 f64 i32 i64; u32/u64 for sum and prod, whose
//                        wrapping arithmetic is bit-identical to the signed one) with sum max min prod;
//                        anything else (int8, uint8, fp8, avg, PreMulSum, u32/u64 max/min) forwarded
//   Send / Recv          peerlink's stream-ordered NCCL-form send/recv (any dtype); to itself: a copy
//   Broadcast / Bcast, AllGather, AlltoAll, Reduce, ReduceScatter
//                        peerlink's collectives (table below) for the dtypes above; broadcast,
//                        all-gather and all-to-all of other dtypes (int8, uint8, fp8) take the p2p
//                        plan below, reduce / reduce-scatter of them are forwarded
//   Gather, Scatter      peerlink send/recv inside one group, as NCCL itself builds them (any dtype);
//                        the same p2p plan serves broadcast/all-gather/all-to-all when switched off
//   in-place AlltoAll    forwarded (peerlink's all_to_all is not in place, as NCCL)
// Forwarded = the real NCCL on a real communicator created lazily (real_comm): never silently wrong.
#include <cstring>

#include "real_nccl.h"
#include "shim.h"

// ==== peerlink's own collectives (include/peerlink/collectives.h, issue 14), ONE LINE PER OP ====
// 1 = call peerlink's collective (up to 8 ranks, the dtypes of pl_dtype; otherwise the p2p plan or
// the real NCCL as described above); 0 = the p2p plan (broadcast, all-gather, all-to-all) or
// forwarding (reduce, reduce-scatter) only.
#define PL_NCCL_USE_PL_ALL_GATHER 1
#define PL_NCCL_USE_PL_REDUCE_SCATTER 1
#define PL_NCCL_USE_PL_BROADCAST 1
#define PL_NCCL_USE_PL_REDUCE 1
#define PL_NCCL_USE_PL_ALL_TO_ALL 1
// ===================================================================================================

using namespace peerlink;
using namespace peerlink::nccl;

namespace {

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

bool pl_op(ncclRedOp_t op, ReduceOp* out) {
  switch (op) {
    case ncclSum: *out = ReduceOp::Sum; return true;
    case ncclProd: *out = ReduceOp::Prod; return true;
    case ncclMax: *out = ReduceOp::Max; return true;
    case ncclMin: *out = ReduceOp::Min; return true;
    default: return false;  // avg, PreMulSum
  }
}

// The peerlink dtype for an arithmetic op, or false (forward).
bool pl_dtype(ncclDataType_t t, ncclRedOp_t op, DataType* out) {
  bool wrap = op == ncclSum || op == ncclProd;
  switch (t) {
    case ncclFloat32: *out = DataType::F32; return true;
    case ncclFloat16: *out = DataType::F16; return true;
    case ncclBfloat16: *out = DataType::BF16; return true;
    case ncclFloat64: *out = DataType::F64; return true;
    case ncclInt32: *out = DataType::I32; return true;
    case ncclInt64: *out = DataType::I64; return true;
    case ncclUint32: *out = DataType::I32; return wrap;
    case ncclUint64: *out = DataType::I64; return wrap;
    default: return false;
  }
}

ncclResult_t bad(const char* what, const std::string& msg) {
  set_last_error(std::string(what) + ": " + msg);
  return ncclInvalidArgument;
}

// Common argument checks of every op (NCCL's own checks: comm, dtype, op, root/peer, pointers).
ncclResult_t check_args(ncclComm* c, const char* what, ncclDataType_t t, int op, int root, size_t count,
                        std::initializer_list<const void*> bufs) {
  if (ncclResult_t r = check_comm(c, what)) return r;
  if (type_size(t) == 0) return bad(what, "invalid datatype " + std::to_string(static_cast<int>(t)));
  if (op >= 0) {
    bool known = op < ncclNumOps;
    if (!known) {
      std::lock_guard<std::mutex> g(c->mu);
      known = c->route == Route::Real || c->premul.count(op) > 0;
    }
    if (!known) return bad(what, "invalid reduction op " + std::to_string(op));
  }
  if (root != INT_MIN && (root < 0 || root >= c->nranks))
    return bad(what, "root/peer " + std::to_string(root) + " out of range [0, " + std::to_string(c->nranks) + ")");
  if (count > 0)
    for (const void* b : bufs)
      if (!b) return bad(what, "NULL buffer for " + std::to_string(count) + " elements");
  return ncclSuccess;
}

void say(ncclComm* c, const char* what, const char* path) {
  if (!c->log.info) return;
  if (c->log.trace) {
    log_line("TRACE", "comm %p rank %d: %s -> %s", static_cast<void*>(c), c->rank, what, path);
    return;
  }
  std::lock_guard<std::mutex> g(c->mu);
  if (c->logged.insert(std::string(what) + "/" + path).second)
    log_line("INFO", "comm %p rank %d: %s -> %s", static_cast<void*>(c), c->rank, what, path);
}

// The real op for `op` on the real communicator (a PreMulSum placeholder is created there now).
ncclResult_t real_redop(ncclComm* c, ncclComm_t rc, ncclRedOp_t op, ncclRedOp_t* out) {
  *out = op;
  if (c->route == Route::Real || op < ncclNumOps) return ncclSuccess;
  std::lock_guard<std::mutex> g(c->mu);
  auto it = c->premul.find(op);
  if (it == c->premul.end()) return ncclInvalidArgument;
  ncclComm::PreMul& p = it->second;
  if (!p.created) {
    void* scalar = p.residence == ncclScalarDevice ? p.device_scalar : p.scalar.data();
    const RealNccl* real = real_nccl(c->opts.nccl_library);
    ncclResult_t r = real->ncclRedOpCreatePreMulSum(&p.real_op, scalar, p.dtype, p.residence, rc);
    if (r != ncclSuccess) return r;
    p.created = true;
  }
  *out = p.real_op;
  return ncclSuccess;
}

// Queues `call(real, real_comm, real_op)` as a forwarded op of `c`.
template <class F>
ncclResult_t forward(ncclComm* c, const char* what, ncclRedOp_t op, F call) {
  say(c, what, c->route == Route::Real ? "real NCCL (communicator routed there)" : "real NCCL (forwarded)");
  Op o;
  o.comm = c;
  o.run = [c, what, op, call]() -> ncclResult_t {
    ncclComm_t rc = c->route == Route::Real ? c->real : real_comm(c, what);
    if (!rc) return ncclInvalidUsage;
    ncclRedOp_t rop;
    if (ncclResult_t r = real_redop(c, rc, op, &rop)) return r;
    return call(real_nccl(c->opts.nccl_library), rc, rop);
  };
  return submit(std::move(o));
}

// A peerlink call as an op; exceptions become the NCCL code and the last error.
template <class F>
Op peerlink_op(ncclComm* c, const char* what, OpKind kind, F call) {
  Op o;
  o.comm = c;
  o.kind = kind;
  o.run = [c, what, call]() -> ncclResult_t {
    try {
      call();
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
ncclResult_t on_peerlink(ncclComm* c, const char* what, OpKind kind, F call) {
  return submit(peerlink_op(c, what, kind, call));
}

// A stream-ordered local copy (host backend: memcpy).
void local_copy(ncclComm* c, void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0 || dst == src) return;
  if (c->device < 0) std::memcpy(dst, src, bytes);
  else device::copy_async(dst, src, bytes, stream);
}

// Send/recv of `c` with `peer`, inside the batch's peerlink group; to itself: matched FIFO here.
void p2p_send(ncclComm* c, int peer, const void* buf, size_t bytes, void* stream) {
  if (peer != c->rank) return c->pl->send(peer, buf, bytes, stream);
  std::lock_guard<std::mutex> g(c->mu);
  if (c->self_recvs.empty()) return c->self_sends.push_back({const_cast<void*>(buf), bytes});
  ncclComm::SelfMsg r = c->self_recvs.front();
  c->self_recvs.pop_front();
  if (r.bytes != bytes)
    throw InvalidArgument("send to self of " + std::to_string(bytes) + " bytes matched a recv of " +
                          std::to_string(r.bytes));
  local_copy(c, r.buf, buf, bytes, stream);
}

void p2p_recv(ncclComm* c, int peer, void* buf, size_t bytes, void* stream) {
  if (peer != c->rank) return c->pl->recv(peer, buf, bytes, stream);
  std::lock_guard<std::mutex> g(c->mu);
  if (c->self_sends.empty()) return c->self_recvs.push_back({buf, bytes});
  ncclComm::SelfMsg s = c->self_sends.front();
  c->self_sends.pop_front();
  if (s.bytes != bytes)
    throw InvalidArgument("recv from self of " + std::to_string(bytes) + " bytes matched a send of " +
                          std::to_string(s.bytes));
  local_copy(c, buf, s.buf, bytes, stream);
}

bool overlap(const void* a, const void* b, size_t bytes) {
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  return bytes > 0 && x < y + bytes && y < x + bytes;
}

}  // namespace

PL_NCCL_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                          ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const char* what = "ncclAllReduce";
  if (ncclResult_t r = check_args(comm, what, datatype, op, INT_MIN, count, {sendbuff, recvbuff})) return r;
  DataType dt;
  ReduceOp rop;
  // peerlink's allreduce serves up to 8 ranks (one node's GPUs; UnsupportedError beyond).
  if (comm->route == Route::Peerlink && comm->nranks <= 8 && pl_dtype(datatype, op, &dt) && pl_op(op, &rop)) {
    say(comm, what, "peerlink allreduce");
    return on_peerlink(comm, what, OpKind::Collective, [=] {
      comm->used_allreduce = true;
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
  if (comm->route == Route::Real)
    return forward(comm, what, ncclSum, [=](const RealNccl* r, ncclComm_t rc, ncclRedOp_t) {
      return r->ncclSend(sendbuff, count, datatype, peer, rc, stream);
    });
  say(comm, what, "peerlink send");
  size_t bytes = count * type_size(datatype);
  auto src = std::make_shared<const void*>(sendbuff);
  Op o = peerlink_op(comm, what, OpKind::P2p, [=] { p2p_send(comm, peer, *src, bytes, stream); });
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
  if (comm->route == Route::Real)
    return forward(comm, what, ncclSum, [=](const RealNccl* r, ncclComm_t rc, ncclRedOp_t) {
      return r->ncclRecv(recvbuff, count, datatype, peer, rc, stream);
    });
  say(comm, what, "peerlink recv");
  size_t bytes = count * type_size(datatype);
  Op o = peerlink_op(comm, what, OpKind::P2p, [=] { p2p_recv(comm, peer, recvbuff, bytes, stream); });
  o.recv_dst = static_cast<char*>(recvbuff);
  o.recv_bytes = bytes;
  return submit(std::move(o));
}

PL_NCCL_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                          ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  const char* what = "ncclBroadcast";
  if (ncclResult_t r = check_args(comm, what, datatype, -1, root, count, {recvbuff})) return r;
  if (comm->rank == root && count > 0 && !sendbuff) return bad(what, "root's sendbuff is NULL");
  if (comm->route == Route::Peerlink) {
#if PL_NCCL_USE_PL_BROADCAST
    DataType dt;
    if (comm->nranks <= 8 && pl_dtype(datatype, ncclSum, &dt)) {  // any dtype of the same size would do: no arithmetic
      say(comm, what, "peerlink broadcast");
      return on_peerlink(comm, what, OpKind::Collective,
                         [=] { broadcast(*comm->pl, sendbuff, recvbuff, count, dt, root, stream); });
    }
#endif
    say(comm, what, "peerlink send/recv");
    size_t bytes = count * type_size(datatype);
    return on_peerlink(comm, what, OpKind::P2p, [=] {
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

PL_NCCL_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  const char* what = "ncclAllGather";
  if (ncclResult_t r = check_args(comm, what, datatype, -1, INT_MIN, sendcount, {sendbuff, recvbuff})) return r;
  if (comm->route == Route::Peerlink) {
#if PL_NCCL_USE_PL_ALL_GATHER
    DataType dt;
    if (comm->nranks <= 8 && pl_dtype(datatype, ncclSum, &dt)) {
      say(comm, what, "peerlink all_gather");
      return on_peerlink(comm, what, OpKind::Collective,
                         [=] { all_gather(*comm->pl, sendbuff, recvbuff, sendcount, dt, stream); });
    }
#endif
    say(comm, what, "peerlink send/recv");
    size_t b = sendcount * type_size(datatype);
    return on_peerlink(comm, what, OpKind::P2p, [=] {
      char* out = static_cast<char*>(recvbuff);
      for (int q = 0; q < comm->nranks; ++q) {
        if (q == comm->rank) continue;
        p2p_send(comm, q, sendbuff, b, stream);
        p2p_recv(comm, q, out + q * b, b, stream);
      }
      local_copy(comm, out + comm->rank * b, sendbuff, b, stream);
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
  size_t b = count * type_size(datatype);
  // In place, a peer's block would land where this rank still reads its own outgoing block.
  bool in_place = overlap(sendbuff, recvbuff, b * comm->nranks);
  if (comm->route == Route::Peerlink && !in_place) {
#if PL_NCCL_USE_PL_ALL_TO_ALL
    DataType dt;
    if (comm->nranks <= 8 && pl_dtype(datatype, ncclSum, &dt)) {
      say(comm, what, "peerlink all_to_all");
      return on_peerlink(comm, what, OpKind::Collective,
                         [=] { all_to_all(*comm->pl, sendbuff, recvbuff, count, dt, stream); });
    }
#endif
    say(comm, what, "peerlink send/recv");
    return on_peerlink(comm, what, OpKind::P2p, [=] {
      const char* in = static_cast<const char*>(sendbuff);
      char* out = static_cast<char*>(recvbuff);
      for (int q = 0; q < comm->nranks; ++q) {
        if (q == comm->rank) continue;
        p2p_send(comm, q, in + q * b, b, stream);
        p2p_recv(comm, q, out + q * b, b, stream);
      }
      local_copy(comm, out + comm->rank * b, in + comm->rank * b, b, stream);
    });
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
  if (comm->route == Route::Peerlink) {
    say(comm, what, "peerlink send/recv");
    size_t b = count * type_size(datatype);
    return on_peerlink(comm, what, OpKind::P2p, [=] {
      if (comm->rank != root) return p2p_send(comm, root, sendbuff, b, stream);
      char* out = static_cast<char*>(recvbuff);
      for (int q = 0; q < comm->nranks; ++q)
        if (q != root) p2p_recv(comm, q, out + q * b, b, stream);
      local_copy(comm, out + root * b, sendbuff, b, stream);
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
  if (comm->route == Route::Peerlink) {
    say(comm, what, "peerlink send/recv");
    size_t b = count * type_size(datatype);
    return on_peerlink(comm, what, OpKind::P2p, [=] {
      if (comm->rank != root) return p2p_recv(comm, root, recvbuff, b, stream);
      const char* in = static_cast<const char*>(sendbuff);
      for (int q = 0; q < comm->nranks; ++q)
        if (q != root) p2p_send(comm, q, in + q * b, b, stream);
      local_copy(comm, recvbuff, in + root * b, b, stream);
    });
  }
  return forward(comm, what, ncclSum, [=](const RealNccl* r, ncclComm_t rc, ncclRedOp_t) {
    return r->ncclScatter(sendbuff, recvbuff, count, datatype, root, rc, stream);
  });
}

PL_NCCL_EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  const char* what = "ncclReduce";
  if (ncclResult_t r = check_args(comm, what, datatype, op, root, count, {sendbuff})) return r;
  if (comm->rank == root && count > 0 && !recvbuff) return bad(what, "root's recvbuff is NULL");
#if PL_NCCL_USE_PL_REDUCE
  DataType dt;
  ReduceOp rop;
  if (comm->route == Route::Peerlink && comm->nranks <= 8 && pl_dtype(datatype, op, &dt) && pl_op(op, &rop)) {
    say(comm, what, "peerlink reduce");
    return on_peerlink(comm, what, OpKind::Collective,
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
#if PL_NCCL_USE_PL_REDUCE_SCATTER
  DataType dt;
  ReduceOp rop;
  if (comm->route == Route::Peerlink && comm->nranks <= 8 && pl_dtype(datatype, op, &dt) && pl_op(op, &rop)) {
    say(comm, what, "peerlink reduce_scatter");
    return on_peerlink(comm, what, OpKind::Collective,
                       [=] { reduce_scatter(*comm->pl, sendbuff, recvbuff, recvcount, dt, rop, stream); });
  }
#endif
  return forward(comm, what, op, [=](const RealNccl* r, ncclComm_t rc, ncclRedOp_t rop2) {
    return r->ncclReduceScatter(sendbuff, recvbuff, recvcount, datatype, rop2, rc, stream);
  });
}
