#include "transport/links.h"

namespace peerlink::detail {

PairLinks make_links(Path path, Completion completion, PairEnv& env, Publications& pubs, const LinkResources& res) {
  if (path == Path::Relay) return make_relay_links(env, pubs, res);
  if (completion == Completion::DoneSeq) return make_done_seq_links(env, pubs, res);
  return make_ring_links(env, pubs, res);
}

bool ArrivalMatcher::match(std::deque<RecvOp>& recvs, PairEnv& env, bool ack) {
  bool moved = false, acked = false;
  while (!recvs.empty()) {
    RecvOp& r = recvs.front();
    auto it = arrived_.find(r.seq);
    if (it == arrived_.end()) break;
    const shm::RingMsg& a = it->second;
    uint64_t status = a.arg0;
    if (status == kStatusOk && (r.buf_id != a.buf_id || r.offset != a.offset || r.len != a.len))
      status = kStatusMismatch;
    if (ack) {
      shm::RingMsg reply{kMsgAck, a.buf_id, a.seq, 0, 0, 0, status, 0, 0};
      if (!env.in.ack.push(reply)) break;
      acked = true;
    }
    finish_recv(r, status, a.buf_id, a.offset, a.len, env.peer);
    arrived_.erase(it);
    recvs.pop_front();
    moved = true;
  }
  if (acked) wake_peer_send(env);
  return moved;
}

}  // namespace peerlink::detail
