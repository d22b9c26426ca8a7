// The version-0 handshake (RTS/CTS): a send that names no version asks the receiver for the
// registration of its matching irecv (RTS on the msg ring), the receiver answers once that irecv is
// posted (CTS on the ack ring: status and version; the handle is read from the registry), then the
// sender copies like any direct send. Used by both direct links; the relay needs no handshake (its
// receiver resolves version 0 itself).
#pragma once
#include <deque>
#include <map>
#include <set>

#include "transport/link.h"

namespace peerlink::detail {

class HandshakeSender {
 public:
  explicit HandshakeSender(PairEnv& env) : env_(env) {}
  // kNew -> kAwaitCts; false when the ring is full (try again later, in order).
  bool send_rts(SendOp& op);
  // A CTS from the ack ring (validated by check_reply). CTSs of given-up ops are dropped.
  void on_cts(const shm::RingMsg& m);
  // kAwaitCts -> kReady once its CTS arrived: dst bound, or a failure status. False: not yet.
  bool resolve(SendOp& op);
  // The op was given up while waiting: its CTS, when it comes, is dropped.
  void forget(uint64_t seq);
  void clear();

 private:
  PairEnv& env_;
  std::set<uint64_t> awaiting_;
  std::map<uint64_t, shm::RingMsg> cts_;
};

class HandshakeResponder {
 public:
  explicit HandshakeResponder(PairEnv& env) : env_(env) {}
  void on_rts(const shm::RingMsg& m) { rts_[m.seq] = m; }
  // Answers every RTS whose irecv is posted; fails that irecv when the request does not match it.
  bool answer(std::deque<RecvOp>& recvs, Publications& pubs);
  bool pending() const { return !rts_.empty(); }  // RTSs waiting for their irecv

 private:
  PairEnv& env_;
  std::map<uint64_t, shm::RingMsg> rts_;
};

}  // namespace peerlink::detail
