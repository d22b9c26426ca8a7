// Helpers of the op entry points (ops_common.h).
#include "ops_common.h"

#include <cstring>

namespace peerlink::nccl {

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
    case ncclAvg: *out = ReduceOp::Avg; return true;  // signed and float types only (pl_dtype)
    default: return false;  // PreMulSum
  }
}

// The peerlink dtype for an arithmetic op, or false (forward). uint32/uint64 run as int32/int64
// where the bits agree: sum and prod wrap alike; max, min and avg (a division) differ.
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

// A stream-ordered local copy (host backend: memcpy).
void local_copy(ncclComm* c, void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0 || dst == src) return;
  if (c->device < 0) std::memcpy(dst, src, bytes);
  else device::copy_async(dst, src, bytes, stream);
}

bool use_p2p_plan(ncclComm* c, size_t block, const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
                  void* stream) {
  const Options& o = c->opts;
  if (o.nccl_p2p_plan_min == 0 || block < o.nccl_p2p_plan_min || c->p2p_forward) return false;
  // Captured, a plain recvbuf gets a window of its own (collectives/graph_windows.h) and the
  // collective's zero-copy path beats the plan: 2x H100, nccl-tests -g 2 -G 100 -R 0, 128 MB
  // all_to_all, plan / collective (bench_collectives, plain buffers): 202.5 / 196.3 us out of place,
  // 293.0 staged in place; all_gather 32 MB 63.8 / 59.0.
  if (c->device >= 0 && o.coll_graph_register != 0 && o.coll_zero_copy_min > 0 && block >= o.coll_zero_copy_min &&
      device::is_capturing(stream))
    return false;
  return !(window_zero_copy(*c->pl, send, send_bytes) && window_zero_copy(*c->pl, recv, recv_bytes));
}

// 2x H200, nccl-tests alltoall_perf -g 2 -G 100 in place, plan / collective us:
// 32 MB 59.83 / 59.68-59.74, 64 MB 106.15-106.16 / 109.39-109.43, 128 MB 198.36-198.43 /
// 208.65-208.77, 256 MB 382.45-382.56 / 405.49-406.84 (NCCL's best of -R 0 / -R 2: 59.58, 106.36,
// 201.65, 385.36).
bool swap_by_p2p_plan(ncclComm* c, size_t block) {
  const Options& o = c->opts;
  if (c->device < 0 || c->p2p_forward || o.nccl_p2p_plan_min == 0 || o.stream_direct_min == 0 ||
      block < o.stream_direct_min)
    return false;
  for (int q = 0; q < c->nranks; ++q)
    if (q != c->rank && !c->pl->shares_process(q)) return false;
  return true;
}

// A rank's own block in a p2p plan. With one rank there is nothing for the group's kernel to run
// beside it, and a copy is faster (one H200, nccl-tests gather -g 1 -G 100, us, engine / NCCL's
// copy: 64 B 1.11 / 0.94, 128 MB 78.1 / 64.3).
void group_copy(ncclComm* c, void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0 || dst == src) return;
  if (c->device < 0 || c->nranks == 1) return local_copy(c, dst, src, bytes, stream);
  c->pl->send(c->rank, src, bytes, stream);  // matched by the engine at the group's end (same stream)
  c->pl->recv(c->rank, dst, bytes, stream);
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

// Every op but a PreMulSum is the identity on one rank, in any dtype: a copy, nothing in place
// (int8 / uint8 / fp8 and unsigned max / min / avg included, which would otherwise go to a real NCCL
// communicator made for them; NCCL 2.28.9 itself refuses fp8 avg on one rank: invalid
// argument).
bool one_rank_reduction(ncclComm* c, const char* what, ncclRedOp_t op) {
  if (c->route != Route::Peerlink || c->nranks != 1 || op >= ncclNumOps) return false;
  say(c, what, "a copy (one rank)");
  return true;
}

ncclResult_t copy_as_collective(ncclComm* c, const char* what, void* dst, const void* src, size_t bytes, void* stream) {
  return on_peerlink(c, what, OpKind::Collective, stream, [=] { local_copy(c, dst, src, bytes, stream); });
}

bool empty_collective(ncclComm* c, const char* what, size_t count) {
  if (count != 0 || c->route == Route::Real) return false;
  say(c, what, "nothing (count 0)");
  return true;
}

bool overlap(const void* a, const void* b, size_t bytes) {
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  return bytes > 0 && x < y + bytes && y < x + bytes;
}

std::shared_ptr<const ncclComm::PreMul> premul_of(ncclComm* c, ncclRedOp_t op) {
  if (c->route == Route::Real || op < ncclNumOps) return nullptr;
  std::lock_guard<std::mutex> g(c->mu);
  auto it = c->premul.find(op);
  if (it == c->premul.end()) return nullptr;
  return std::make_shared<const ncclComm::PreMul>(it->second);
}

ncclResult_t with_real_op(ncclComm* c, ncclComm_t rc, ncclRedOp_t op, const ncclComm::PreMul* pm,
                          const std::function<ncclResult_t(ncclRedOp_t)>& call) {
  if (!pm) return call(op);
  const RealNccl* real = real_nccl(c->opts.nccl_library);
  void* scalar = pm->residence == ncclScalarDevice ? pm->device_scalar : const_cast<char*>(pm->scalar.data());
  ncclRedOp_t rop;
  ncclResult_t r = real->ncclRedOpCreatePreMulSum(&rop, scalar, pm->dtype, pm->residence, rc);
  if (r != ncclSuccess) return r;
  r = call(rop);
  ncclResult_t d = real->ncclRedOpDestroy(rop, rc);
  return r != ncclSuccess ? r : d;
}

}  // namespace peerlink::nccl
