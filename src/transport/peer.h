// Per-peer state of the transport: the pair's segments, its path and completion, and the queues of
// sends to and receives from that peer.
#pragma once
#include <atomic>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>

#include "common/shm_segment.h"
#include "transport/ipc_manager.h"
#include "transport/layout.h"
#include "transport/request_state.h"

namespace peerlink::detail {

struct SendOp {
  enum Stage { kNew, kAwaitCts, kCopying, kCopied, kAwaitAck, kRelay };
  std::shared_ptr<RequestState> req;
  uint64_t seq = 0;
  const char* src = nullptr;
  size_t len = 0;
  uint32_t buf_id = 0;
  size_t offset = 0;
  uint64_t version = 0;
  char* dst = nullptr;
  std::shared_ptr<Mapping> map;  // keeps the destination mapped until the copy completed
  Stage stage = kNew;
  uint64_t ticket = 0;
  bool signaled = false;
  bool gpu_signal = false;       // done_seq is stored by the copy stream itself (no CPU hop)
  uint32_t status = 0;           // MsgStatus carried in the descriptor / SEND_DONE
  size_t relay_issued = 0;       // bytes handed to staging
};

struct RecvOp {
  std::shared_ptr<RequestState> req;
  bool finished = false;  // failed early (legacy handshake rejected); popped when its seq passes
  uint64_t seq = 0;
  uint32_t buf_id = 0;
  size_t offset = 0;
  size_t len = 0;
};

// Receiver's own record of what it published to one peer (relay destinations, CTS replies).
struct LocalPublication {
  char* ptr = nullptr;
  uint64_t len = 0;
  uint64_t version = 0;
  RegSlot* slot = nullptr;
  Publication pub;
};

struct RelayChunk {  // a staging chunk being filled (send) or drained (recv)
  uint64_t index = 0;  // chunk number in the ring
  uint64_t ticket = 0;
  std::shared_ptr<SendOp> op;  // send side
  RelaySlotMeta meta{};        // receive side: validated copy of the slot's metadata
  bool error = false;
};

struct Peer {
  int rank = -1;
  Path path = Path::Direct;
  Completion completion = Completion::Ring;

  common::Segment in_seg, out_seg, chan_seg, relay_in_seg, relay_out_seg;
  PairView in, out;                   // in: peer->me (I receive), out: me->peer (I send)
  shm::PaddedCounter* done_out = nullptr;  // my done_seq towards peer
  shm::PaddedCounter* done_in = nullptr;   // peer's done_seq towards me
  RelayView relay_in, relay_out;
  bool chan_pinned = false;          // channel page registered for stream-ordered done_seq stores

  std::atomic<bool> lost{false};
  std::exception_ptr lost_error;       // set before `lost`
  std::atomic<int64_t> last_alive_check_ns{0};

  // ---- send side: guarded by send_mu (caller enqueues, send worker progresses)
  std::mutex send_mu;
  std::unique_ptr<gpu::CopyQueue> send_queue;
  uint64_t next_send_seq = 0;
  uint64_t signaled_seq = 0;           // done_seq / SEND_DONE published up to here
  uint64_t acked_seq = 0;              // ring: highest ACK seen
  std::deque<std::shared_ptr<SendOp>> sends;
  std::map<uint64_t, shm::RingMsg> cts;  // CTS replies by seq
  std::map<uint64_t, uint64_t> ack_status;  // non-OK ACKs by seq
  std::deque<RelayChunk> relay_filling;
  uint64_t relay_next_chunk = 0;       // next staging chunk to fill

  // ---- receive side: guarded by recv_mu (caller posts, recv worker progresses)
  std::mutex recv_mu;
  std::unique_ptr<gpu::CopyQueue> recv_queue;
  uint64_t next_recv_seq = 0;
  std::deque<RecvOp> recvs;
  std::map<uint64_t, shm::RingMsg> arrived;     // ring / relay: messages landed, by seq
  std::map<uint64_t, shm::RingMsg> rts;         // legacy requests waiting for their irecv
  uint64_t desc_done = 0;                       // done_seq: descriptors consumed
  std::deque<RelayChunk> relay_draining;
  uint64_t relay_next_drain = 0;
  std::map<uint64_t, bool> relay_failed;        // seq -> true when a chunk could not land

  // ---- publications (receiver role), guarded by pub_mu
  std::mutex pub_mu;
  std::map<uint32_t, LocalPublication> pubs;
};

}  // namespace peerlink::detail
