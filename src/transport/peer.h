// Per-peer state of the transport: the pair's segments (setup resources), its path and
// completion, its two links (all protocol state lives there) and the locks that serialize them.
#pragma once
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "common/shm_segment.h"
#include "common/spin_mutex.h"
#include "transport/caller_progress.h"
#include "transport/link.h"

namespace peerlink::detail {

struct Peer {
  int rank = -1;
  Path path = Path::Direct;
  std::string path_reason;  // why (this rank's topology decision, or the peer asked to relay)
  bool nvlink = false;      // direct over NVLink or the same GPU (PathChoice::nvlink)
  // The peer's bootstrap slot names this process's pid: a routing hint for the layers above (the
  // rendezvous is untrusted, so nothing that must hold depends on it; the stream engine learns the
  // same from the mappings themselves).
  bool same_process = false;
  Completion completion = Completion::Ring;

  // Segments mapped for this pair: in_seg pair peer->me (I created it), out_seg pair me->peer,
  // chan_seg the done_seq channel, relay_* the staging rings.
  common::Segment in_seg, out_seg, chan_seg, relay_in_seg, relay_out_seg;
  bool chan_pinned = false;  // channel page registered for stream-ordered done_seq stores
  RelayView relay_in, relay_out;
  PairEnv env;

  std::atomic<bool> lost{false};
  std::exception_ptr lost_error;  // set before `lost`
  std::atomic<int64_t> last_alive_check_ns{0};

  // Send side: the caller submits and the send worker progresses, both under send_mu (spins
  // before sleeping: the worker takes it on every round).
  common::SpinThenSleepMutex send_mu;
  std::unique_ptr<gpu::CopyQueue> send_queue;
  uint64_t next_send_seq = 0;
  std::unique_ptr<SendLink> send;
  // Given to every send request when waiting threads may drive the send link (host backend).
  std::shared_ptr<PairProgress> send_progress;

  // Receive side: the caller posts and the receive worker progresses, both under recv_mu.
  common::SpinThenSleepMutex recv_mu;
  std::unique_ptr<gpu::CopyQueue> recv_queue;
  uint64_t next_recv_seq = 0;
  std::unique_ptr<RecvLink> recv;
  // Given to every irecv when the receive link completes on the waiting thread (direct links).
  std::shared_ptr<PairProgress> recv_progress;

  // What this rank published to the peer (receiver role). Lock order: recv_mu, then pubs.mu.
  Publications pubs;
};

}  // namespace peerlink::detail
