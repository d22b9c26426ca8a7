// Send/recv of a HierCommunicator and the ops made of them (AlltoAll, Gather, Scatter).
//
// A group's messages split by peer: this rank itself (a copy), peers of this node (peerlink's
// stream-ordered send/recv on the node communicator, one group), peers elsewhere (the world engine,
// one group). Every rank issues them in that order. A rank blocks (host backend) or its stream waits
// (GPUs) only inside one phase, and a phase's peers are all in the same phase of the same group:
// same-node peers run phase 1 before anything of this group on the engine, and the engine's phase
// waits only for ranks that finished their own phase 1, which depends on nobody outside their node.
// So no pattern (ring, all pairs, any mix across and within nodes) can deadlock. A failure of phase
// 1 still issues phase 2, whose messages do not depend on it, so the other nodes' ranks are not
// left waiting; the error is reported after.
#include <deque>

#include "common/format.h"
#include "hier/hier_impl.h"
#include "peerlink/errors.h"

namespace peerlink {

void HierCommunicator::Impl::issue(std::vector<P2p> ops) {
  // Messages to this rank itself, matched in order (same size), copied before anything lands.
  std::deque<const P2p*> self_sends, self_recvs;
  for (const P2p& o : ops)
    if (o.peer == rank) (o.is_send ? self_sends : self_recvs).push_back(&o);
  if (self_sends.size() != self_recvs.size())
    throw InvalidArgument(common::format("group of rank {}: {} send(s) to itself but {} recv(s) from itself", rank,
                                         self_sends.size(), self_recvs.size()));
  for (size_t i = 0; i < self_sends.size(); ++i)
    if (self_sends[i]->bytes != self_recvs[i]->bytes)
      throw InvalidArgument(common::format("group of rank {}: a send to itself of {} bytes matched a recv of {}", rank,
                                           self_sends[i]->bytes, self_recvs[i]->bytes));
  for (size_t i = 0; i < self_sends.size(); ++i)
    copy(self_recvs[i]->buf, self_sends[i]->buf, self_sends[i]->bytes, self_recvs[i]->stream);

  std::exception_ptr first;
  auto on_node = [&](const P2p& o) { return node_p2p && map.node_of(o.peer) == node; };
  auto phase = [&](bool local, auto&& start, auto&& each, auto&& end) {
    bool any = false;
    for (const P2p& o : ops) any = any || (o.peer != rank && on_node(o) == local);
    if (!any) return;
    start();
    try {
      for (const P2p& o : ops)
        if (o.peer != rank && on_node(o) == local) each(o);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
    try {
      end();  // always closed: what was queued still meets its peers
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  };
  phase(
      true, [&] { node_comm->group_start(); },
      [&](const P2p& o) {
        int peer = map.local_rank(o.peer);
        if (o.is_send) node_comm->send(peer, o.buf, o.bytes, o.stream);
        else node_comm->recv(peer, o.buf, o.bytes, o.stream);
      },
      [&] { node_comm->group_end(); });
  phase(
      false, [&] { world->group_start(); },
      [&](const P2p& o) {
        if (o.is_send) world->send(o.peer, o.buf, o.bytes, o.stream);
        else world->recv(o.peer, o.buf, o.bytes, o.stream);
      },
      [&] { world->group_end(); });
  if (first) std::rethrow_exception(first);
}

namespace {
void flush(HierCommunicator::Impl& p) {
  std::vector<HierCommunicator::Impl::P2p> ops;
  ops.swap(p.pending);
  p.issue(std::move(ops));
}
}  // namespace

void HierCommunicator::group_start() { ++impl_->group_depth; }

void HierCommunicator::group_end() {
  Impl& p = *impl_;
  if (p.group_depth <= 0) throw InvalidArgument("HierCommunicator::group_end: no group is open");
  if (--p.group_depth == 0) flush(p);
}

void HierCommunicator::send(int peer, const void* buf, size_t bytes, void* stream) {
  Impl& p = *impl_;
  if (peer < 0 || peer >= p.nranks)
    throw InvalidArgument(common::format("HierCommunicator::send: peer {} is outside [0, {})", peer, p.nranks));
  p.pending.push_back({true, peer, const_cast<void*>(buf), bytes, stream});
  if (p.group_depth == 0) flush(p);
}

void HierCommunicator::recv(int peer, void* buf, size_t bytes, void* stream) {
  Impl& p = *impl_;
  if (peer < 0 || peer >= p.nranks)
    throw InvalidArgument(common::format("HierCommunicator::recv: peer {} is outside [0, {})", peer, p.nranks));
  p.pending.push_back({false, peer, buf, bytes, stream});
  if (p.group_depth == 0) flush(p);
}

const char* HierCommunicator::all_to_all(const void* send, void* recv, size_t bytes, void* stream) {
  Impl& p = *impl_;
  const size_t n = static_cast<size_t>(p.nranks);
  if (bytes == 0) return "nothing (count 0)";
  // In place, a peer's block lands where this rank still reads its own outgoing one: the whole send
  // range is staged first (a local copy, small beside what crosses the network).
  const char* in = static_cast<const char*>(send);
  const bool in_place = send == recv;
  if (in_place) {
    char* tmp = static_cast<char*>(p.scratch_for(stream, bytes * n));
    p.copy(tmp, send, bytes * n, stream);
    in = tmp;
  }
  std::vector<Impl::P2p> ops;
  char* out = static_cast<char*>(recv);
  for (size_t q = 0; q < n; ++q) {
    ops.push_back({true, static_cast<int>(q), const_cast<char*>(in + q * bytes), bytes, stream});
    ops.push_back({false, static_cast<int>(q), out + q * bytes, bytes, stream});
  }
  p.issue(std::move(ops));
  return in_place ? "send/recv per peer (staged, in place): peerlink inside the node, the inter-node engine between"
                  : "send/recv per peer: peerlink inside the node, the inter-node engine between";
}

const char* HierCommunicator::gather(const void* send, void* recv, size_t bytes, int root, void* stream) {
  Impl& p = *impl_;
  if (root < 0 || root >= p.nranks)
    throw InvalidArgument(common::format("HierCommunicator::gather: root {} of {}", root, p.nranks));
  std::vector<Impl::P2p> ops;
  if (p.rank != root) {
    ops.push_back({true, root, const_cast<void*>(send), bytes, stream});
  } else {
    for (int q = 0; q < p.nranks; ++q)
      if (q != root) ops.push_back({false, q, static_cast<char*>(recv) + static_cast<size_t>(q) * bytes, bytes, stream});
    p.copy(static_cast<char*>(recv) + static_cast<size_t>(root) * bytes, send, bytes, stream);
  }
  p.issue(std::move(ops));
  return "send/recv per peer: peerlink inside the node, the inter-node engine between";
}

const char* HierCommunicator::scatter(const void* send, void* recv, size_t bytes, int root, void* stream) {
  Impl& p = *impl_;
  if (root < 0 || root >= p.nranks)
    throw InvalidArgument(common::format("HierCommunicator::scatter: root {} of {}", root, p.nranks));
  std::vector<Impl::P2p> ops;
  if (p.rank != root) {
    ops.push_back({false, root, recv, bytes, stream});
  } else {
    for (int q = 0; q < p.nranks; ++q)
      if (q != root)
        ops.push_back({true, q, const_cast<char*>(static_cast<const char*>(send)) + static_cast<size_t>(q) * bytes,
                       bytes, stream});
    p.copy(recv, static_cast<const char*>(send) + static_cast<size_t>(root) * bytes, bytes, stream);
  }
  p.issue(std::move(ops));
  return "send/recv per peer: peerlink inside the node, the inter-node engine between";
}

}  // namespace peerlink
