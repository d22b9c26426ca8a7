// The collectives of a HierCommunicator: two-level plans where they apply and pay, the whole op on
// the world engine otherwise. L = ranks per node, N = nodes, l = this rank's local index.
//
//   AllReduce      peerlink reduce_scatter into this rank's shard of recv (count/L) -> the rail's
//                  allreduce of that shard -> peerlink all_gather of the shards (in place)
//   ReduceScatter  for each node k, peerlink reduce_scatter of node k's L blocks into tmp[k] -> the
//                  rail's reduce_scatter of tmp (N blocks) into recv
//   AllGather      the rail's all_gather into tmp (N blocks) -> for each node k, peerlink all_gather
//                  of tmp[k] into node k's L blocks of recv
//   Broadcast      peerlink broadcast on the root's node -> the rails broadcast shard l from the
//                  root's node -> peerlink all_gather of the shards on the other nodes
//   Reduce         peerlink reduce_scatter -> the rail's reduce of shard l to the root's node ->
//                  peerlink send/recv of the shards to the root
// Each rail moves 1/L of the data, so the network carries 2(N-1)/N of the buffer per node instead of
// a flat ring's 2(n-1)/n (docs/design-multinode.md has the cost model). Whole on the world engine:
// uneven ranks per node, one rank per node, buffers below Options::hier_min_bytes (0: always whole,
// the default; docs/design-multinode.md says why), counts not
// divisible by L, integer averages (a per-level division would round twice), and for
// ReduceScatter / AllGather ranks that are not node-contiguous (their blocks would need a
// permutation pass). Every phase is enqueued on the caller's stream, so a captured plan replays.
#include "common/format.h"
#include "hier/hier_impl.h"
#include "peerlink/errors.h"

namespace peerlink {
namespace {

constexpr const char* kNothing = "nothing (count 0)";
constexpr const char* kUneven = "whole on the inter-node engine (uneven ranks per node)";
constexpr const char* kOnePerNode = "whole on the inter-node engine (one rank per node)";
constexpr const char* kSmall = "whole on the inter-node engine (below PEERLINK_HIER_MIN_BYTES)";
constexpr const char* kOff = "whole on the inter-node engine (two-level plans off: PEERLINK_HIER_MIN_BYTES=0)";
constexpr const char* kIndivisible = "whole on the inter-node engine (count not divisible by the ranks per node)";
constexpr const char* kNotContiguous = "whole on the inter-node engine (ranks not node-contiguous)";
constexpr const char* kIntAvg = "whole on the inter-node engine (integer average)";
constexpr const char* kNoNodeP2p = "whole on the inter-node engine (a pair of this node has no stream-ordered send/recv)";
constexpr const char* kOdd = "whole on the inter-node engine (an odd number of bytes per piece)";

bool is_int(DataType t) { return t == DataType::I32 || t == DataType::I64; }

char* at(void* p, size_t off) { return static_cast<char*>(p) + off; }
const char* at(const void* p, size_t off) { return static_cast<const char*>(p) + off; }

}  // namespace

bool movement_type(size_t bytes, std::initializer_list<const void*> ptrs, DataType* out, size_t* elem) {
  uintptr_t a = bytes;
  for (const void* p : ptrs) a |= reinterpret_cast<uintptr_t>(p);
  if (a % 8 == 0) *out = DataType::I64, *elem = 8;
  else if (a % 4 == 0) *out = DataType::I32, *elem = 4;
  else if (a % 2 == 0) *out = DataType::F16, *elem = 2;
  else return false;
  return true;
}

const char* HierCommunicator::Impl::whole_reason(size_t bytes) const {
  if (!rail) return map.uniform() ? kOnePerNode : kUneven;
  if (opts.hier_min_bytes == 0) return kOff;
  if (bytes < opts.hier_min_bytes) return kSmall;
  return nullptr;
}

const char* HierCommunicator::allreduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op,
                                        void* stream) {
  Impl& p = *impl_;
  if (count == 0) return kNothing;
  const size_t es = dtype_size(dt);
  const char* why = p.whole_reason(count * es);
  if (!why && count % static_cast<size_t>(p.local_size)) why = kIndivisible;
  if (!why && op == ReduceOp::Avg && is_int(dt)) why = kIntAvg;
  if (why) {
    p.world->allreduce(send, recv, count, dt, op, stream);
    return why;
  }
  const size_t shard = count / static_cast<size_t>(p.local_size);
  char* mine = at(recv, static_cast<size_t>(p.local_rank) * shard * es);
  peerlink::reduce_scatter(*p.node_comm, send, mine, shard, dt, op, stream);
  p.rail->allreduce(mine, mine, shard, dt, op, stream);
  peerlink::all_gather(*p.node_comm, mine, recv, shard, dt, stream);
  p.used_node_collectives = true;
  return "two-level: peerlink reduce_scatter, allreduce of each shard among the rail, peerlink all_gather";
}

const char* HierCommunicator::reduce_scatter(const void* send, void* recv, size_t recvcount, DataType dt, ReduceOp op,
                                             void* stream) {
  Impl& p = *impl_;
  if (recvcount == 0) return kNothing;
  const size_t es = dtype_size(dt), block = recvcount * es;
  const char* why = p.whole_reason(block * static_cast<size_t>(p.nranks));
  if (!why && !p.map.node_contiguous()) why = kNotContiguous;
  if (!why && op == ReduceOp::Avg && is_int(dt)) why = kIntAvg;
  if (why) {
    p.world->reduce_scatter(send, recv, recvcount, dt, op, stream);
    return why;
  }
  const size_t nodes = static_cast<size_t>(p.map.nodes()), L = static_cast<size_t>(p.local_size);
  char* tmp = static_cast<char*>(p.scratch_for(stream, nodes * block));
  for (size_t k = 0; k < nodes; ++k)
    peerlink::reduce_scatter(*p.node_comm, at(send, k * L * block), tmp + k * block, recvcount, dt, op, stream);
  p.rail->reduce_scatter(tmp, recv, recvcount, dt, op, stream);
  p.used_node_collectives = true;
  return "two-level: peerlink reduce_scatter of each node's blocks, reduce_scatter among the rail";
}

const char* HierCommunicator::all_gather(const void* send, void* recv, size_t bytes, void* stream) {
  Impl& p = *impl_;
  if (bytes == 0) return kNothing;
  const char* why = p.whole_reason(bytes * static_cast<size_t>(p.nranks));
  if (!why && !p.map.node_contiguous()) why = kNotContiguous;
  DataType mt = DataType::I64;
  size_t elem = 1;
  if (!why && !movement_type(bytes, {recv}, &mt, &elem)) why = kOdd;
  if (why) {
    p.world->all_gather(send, recv, bytes, stream);
    return why;
  }
  const size_t nodes = static_cast<size_t>(p.map.nodes()), L = static_cast<size_t>(p.local_size);
  char* tmp = static_cast<char*>(p.scratch_for(stream, nodes * bytes));
  p.rail->all_gather(send, tmp, bytes, stream);
  for (size_t k = 0; k < nodes; ++k)
    peerlink::all_gather(*p.node_comm, tmp + k * bytes, at(recv, k * L * bytes), bytes / elem, mt, stream);
  p.used_node_collectives = true;
  return "two-level: all_gather among the rail, peerlink all_gather of each node's blocks";
}

const char* HierCommunicator::broadcast(const void* send, void* recv, size_t bytes, int root, void* stream) {
  Impl& p = *impl_;
  if (root < 0 || root >= p.nranks)
    throw InvalidArgument(common::format("HierCommunicator::broadcast: root {} of {}", root, p.nranks));
  if (bytes == 0) return kNothing;
  const char* why = p.whole_reason(bytes);
  const size_t L = static_cast<size_t>(p.local_size);
  DataType whole_t = DataType::I64, shard_t = DataType::I64;
  size_t whole_e = 1, shard_e = 1;
  if (!why && bytes % L) why = kIndivisible;
  if (!why && (!movement_type(bytes, {send, recv}, &whole_t, &whole_e) ||
               !movement_type(bytes / L, {recv}, &shard_t, &shard_e)))
    why = kOdd;
  if (why) {
    p.world->broadcast(send, recv, bytes, root, stream);
    return why;
  }
  const int root_node = p.map.node_of(root);
  const size_t shard = bytes / L;
  char* mine = at(recv, static_cast<size_t>(p.local_rank) * shard);
  if (p.node == root_node)
    peerlink::broadcast(*p.node_comm, send, recv, bytes / whole_e, whole_t, p.map.local_rank(root), stream);
  p.rail->broadcast(mine, mine, shard, root_node, stream);
  if (p.node != root_node) peerlink::all_gather(*p.node_comm, mine, recv, shard / shard_e, shard_t, stream);
  p.used_node_collectives = true;
  return "two-level: peerlink broadcast on the root's node, broadcast of each shard among the rail, peerlink all_gather";
}

const char* HierCommunicator::reduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op, int root,
                                     void* stream) {
  Impl& p = *impl_;
  if (root < 0 || root >= p.nranks)
    throw InvalidArgument(common::format("HierCommunicator::reduce: root {} of {}", root, p.nranks));
  if (count == 0) return kNothing;
  const size_t es = dtype_size(dt);
  const char* why = p.whole_reason(count * es);
  if (!why && count % static_cast<size_t>(p.local_size)) why = kIndivisible;
  if (!why && op == ReduceOp::Avg && is_int(dt)) why = kIntAvg;
  if (!why && !p.node_p2p) why = kNoNodeP2p;
  if (why) {
    p.world->reduce(send, recv, count, dt, op, root, stream);
    return why;
  }
  const int root_node = p.map.node_of(root), root_local = p.map.local_rank(root);
  const size_t shard = count / static_cast<size_t>(p.local_size), sb = shard * es;
  // The root's shard lands in place; every other rank's in scratch (its recv may be null).
  char* mine = p.rank == root ? at(recv, static_cast<size_t>(p.local_rank) * sb)
                              : static_cast<char*>(p.scratch_for(stream, sb));
  peerlink::reduce_scatter(*p.node_comm, send, mine, shard, dt, op, stream);
  p.rail->reduce(mine, mine, shard, dt, op, root_node, stream);
  if (p.node == root_node) {
    p.node_comm->group_start();
    try {
      if (p.local_rank == root_local) {
        for (int l = 0; l < p.local_size; ++l)
          if (l != root_local) p.node_comm->recv(l, at(recv, static_cast<size_t>(l) * sb), sb, stream);
      } else {
        p.node_comm->send(root_local, mine, sb, stream);
      }
    } catch (...) {
      p.node_comm->group_end();  // what was queued still meets its peers
      throw;
    }
    p.node_comm->group_end();
  }
  p.used_node_collectives = true;
  return "two-level: peerlink reduce_scatter, reduce of each shard among the rail, peerlink gather to the root";
}

}  // namespace peerlink
