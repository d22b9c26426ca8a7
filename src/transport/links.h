// Construction of the links of one pair. make_links is the one place where a pair's path and
// completion select its link classes.
#pragma once
#include <map>
#include <memory>

#include "transport/link.h"

namespace peerlink::detail {

struct LinkResources {
  gpu::CopyQueue* send_queue = nullptr;
  gpu::CopyQueue* recv_queue = nullptr;
  shm::PaddedCounter* done_out = nullptr;  // done_seq: my counter towards the peer
  shm::PaddedCounter* done_in = nullptr;   // done_seq: the peer's counter towards me
  bool chan_pinned = false;                // done_seq: the copy stream may store done_out
  RelayView relay_out, relay_in;           // relay staging rings
};

struct PairLinks {
  std::unique_ptr<SendLink> send;
  std::unique_ptr<RecvLink> recv;
};

PairLinks make_links(Path path, Completion completion, PairEnv& env, Publications& pubs, const LinkResources& res);

// One factory per link class (link_done_seq.cpp, link_ring.cpp, link_relay.cpp).
PairLinks make_done_seq_links(PairEnv& env, Publications& pubs, const LinkResources& res);
PairLinks make_ring_links(PairEnv& env, Publications& pubs, const LinkResources& res);
PairLinks make_relay_links(PairEnv& env, Publications& pubs, const LinkResources& res);

// Ring-style matching of arrivals (SEND_DONE messages or relay completions) to irecvs in FIFO
// order; `ack`: reply on the ring (direct) or not (relay). Returns true when anything moved.
class ArrivalMatcher {
 public:
  void arrived(const shm::RingMsg& m) { arrived_[m.seq] = m; }
  bool match(std::deque<RecvOp>& recvs, PairEnv& env, bool ack);
  void clear() { arrived_.clear(); }

 private:
  std::map<uint64_t, shm::RingMsg> arrived_;
};

}  // namespace peerlink::detail
