// Send side: isend validation and addressing (caller thread), submission to the pair's send link
// (which may issue the copy right here), send_direct's give-up on failure, and the send worker,
// which drives every pair's send link.
#include <thread>

#include "common/format.h"
#include "common/interrupt.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "transport/registry.h"
#include "transport/transport.h"
#include "transport/worker_loop.h"

namespace peerlink::detail {
namespace {
using Clock = std::chrono::steady_clock;

// A send_direct on a ring pair counts its thread as waiting on the pair's replies from before its
// message goes out: a quick peer's ACK may come before the wait starts, and would wake the send
// worker for nothing.
class SendWait {
 public:
  explicit SendWait(PairProgress* p) : p_(p) {
    if (p_) p_->begin_wait();
  }
  ~SendWait() {
    if (p_) p_->end_wait();
  }
  SendWait(const SendWait&) = delete;
  SendWait& operator=(const SendWait&) = delete;

 private:
  PairProgress* p_;
};
}  // namespace

std::shared_ptr<RequestState> Transport::new_request(const char* kind, int peer, uint32_t buf_id, uint64_t offset,
                                                     uint64_t len, uint64_t version, uint64_t seq) {
  auto r = std::make_shared<RequestState>();
  r->timeout = opts_.timeout;
  r->kind = kind;
  r->peer = peer;
  r->buf_id = buf_id;
  r->offset = offset;
  r->len = len;
  r->version = version;
  r->seq = seq;
  return r;
}

Publication Transport::wait_publication(int peer, uint32_t buf_id, uint64_t min_version, const char* what) {
  Peer& P = *peers_[peer];
  const auto deadline = Clock::now() + opts_.timeout;
  common::InterruptPoll interrupt(opts_.interrupt_check);  // abandoning this wait changes nothing
  for (int iter = 0;; ++iter) {
    std::optional<Publication> pub = registry_read(P.env.out.reg, buf_id);
    if (pub && pub->version >= min_version) {
      // Revoked: the owner freed the buffer (Transport::free_memory). It may publish the id again
      // at a newer version, but what was asked for is gone.
      if (pub->revoked)
        throw InvalidArgument(
            common::format("{} to rank {}: buffer {} (version {}) was freed by rank {} and is no longer published",
                           what, peer, buf_id, pub->version, peer));
      return *pub;
    }
    check_peer(peer);
    interrupt.poll();
    if (Clock::now() > deadline)
      throw TimeoutError(
          common::format("{} to rank {}: buffer {} was not published at version >= {} within {} ms (published: {})",
                         what, peer, buf_id, min_version, opts_.timeout.count(),
                         pub ? common::format("version {}", pub->version) : std::string("never")));
    if (iter > 100) std::this_thread::sleep_for(std::chrono::microseconds(iter < 1000 ? 20 : 1000));
  }
}

Transport::SendHandle Transport::submit_send(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset,
                                             uint64_t version) {
  rethrow_worker_error();
  check_peer(peer);
  if (!src && len > 0) throw InvalidArgument(common::format("isend to rank {}: src is null (len {})", peer, len));
  if (offset > SIZE_MAX - len)
    throw InvalidArgument(common::format("isend to rank {}: offset {} + len {} overflows", peer, offset, len));
  Peer& P = *peers_[peer];
  auto op = std::make_shared<SendOp>();
  op->src = static_cast<const char*>(src);
  op->len = len;
  op->buf_id = buf_id;
  op->offset = offset;
  op->version = version;
  if (version > 0) {
    Publication pub = wait_publication(peer, buf_id, version, "isend");
    if (pub.version > version)
      throw InvalidArgument(
          common::format("isend to rank {}: stale version {} for buffer {}; the receiver published version {}", peer,
                         version, buf_id, pub.version));
    if (offset + len > pub.len)
      throw InvalidArgument(
          common::format("isend to rank {}: [offset {}, +len {}) exceeds buffer {} of {} bytes (version {})", peer,
                         offset, len, buf_id, pub.len, version));
    if (P.path == Path::Direct) {
      // The binding is made from exactly the record just bounds-checked, not from a second read.
      Binding bind = ipc_->bind(peer, pub);
      op->dst = bind.ptr + offset;
      op->map = bind.map;
    }
  }
  note_cpu();  // where this rank's reply will come from: the peer's waiter spins or not by it
  std::lock_guard<common::SpinThenSleepMutex> g(P.send_mu);
  op->seq = ++P.next_send_seq;
  op->req = new_request("isend to", peer, buf_id, offset, len, version, op->seq);
  if (P.send_progress) {
    op->req->progress = P.send_progress;
    op->req->bell = P.send_progress->bell();
  }
  try {
    P.send->submit(op);
  } catch (...) {
    --P.next_send_seq;  // nothing was issued: the sequence number is not consumed
    throw;
  }
  // Host memory: submit() already copied (synchronously, on this thread), so this thread also
  // publishes the completion and retires the op, instead of handing both to the send worker. The
  // worker still runs whatever stays pending (a handshake, a relay's later chunks).
  if (backend_->is_host()) {
    try {
      P.send->progress();
    } catch (...) {
      mark_lost(P, std::current_exception());  // as the worker would: the op fails with the pair
    }
  }
  // A send that only waits for its ACK needs no worker: the ACK rings it (or a waiter polls).
  if (P.send->needs_worker()) wake_send_worker();
  return SendHandle{Request(op->req), op};
}

Request Transport::isend(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset, uint64_t version) {
  return submit_send(peer, src, len, buf_id, offset, version).req;
}

void Transport::send_direct(int peer, const void* src, size_t len, uint32_t buf_id, uint64_t version, size_t offset,
                            std::chrono::milliseconds timeout) {
  Peer& P = *peers_[peer];
  SendWait waiting(P.completion == Completion::Ring && P.path == Path::Direct ? P.send_progress.get() : nullptr);
  SendHandle h = submit_send(peer, src, len, buf_id, offset, version);
  try {
    // In slices, so the interruption hook (Python's Ctrl-C, close() on another thread) runs about
    // every InterruptPoll::kInterval; without a hook, one wait.
    if (!opts_.interrupt_check) {
      h.req.wait(timeout);
    } else {
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      common::InterruptPoll interrupt(opts_.interrupt_check);
      for (;;) {
        if (h.req.test()) break;  // throws the operation's own error
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0)
          throw TimeoutError(common::format("{}: not complete after {} ms", h.op->req->what(), timeout.count()));
        try {
          h.req.wait(std::min(left, common::InterruptPoll::kInterval));
          break;
        } catch (const TimeoutError&) {
          if (h.req.test()) break;  // the slice ended as it completed; a failed op throws its error here
        }
        interrupt.poll();
      }
    }
  } catch (...) {
    // A returned call never touches caller memory again: give the message up (no more copies
    // from src; those in flight are waited for) before the error reaches the caller.
    std::lock_guard<common::SpinThenSleepMutex> g(P.send_mu);
    if (!shut_ && P.send) {
      try {
        P.send->cancel(*h.op);
      } catch (...) {
        // A device error while waiting for the copies: the original error is the one to report.
      }
      wake_send_worker();
    }
    throw;
  }
}

void Transport::fail_pending_sends(Peer& P, std::exception_ptr e) {
  std::lock_guard<common::SpinThenSleepMutex> g(P.send_mu);
  if (P.send) P.send->fail_all(e);
}

void Transport::send_worker_main() {
  backend_->bind_worker_thread();  // the copy queue's device guards then switch nothing
  WorkerLoop loop(ctl_->send_bell[rank_], backend_->is_host());
  while (running_.load(std::memory_order_acquire)) {
    uint32_t ticket = loop.prepare();
    bool moved = false, pending = false, busy = false;
    for (auto& pp : peers_) {
      if (!pp) continue;
      Peer& P = *pp;
      if (P.lost.load(std::memory_order_acquire)) {
        fail_pending_sends(P, P.lost_error);
        continue;
      }
      try {
        std::lock_guard<common::SpinThenSleepMutex> g(P.send_mu);
        if (!P.send->pending()) {
          P.send->idle_poll();
        } else {
          pending = true;
          moved |= P.send->progress();
          busy |= P.send->busy();
        }
        // Whether or not other work of the pair is pending (a copy in flight): a kernel armed for
        // the next small send never outlives its window.
        if (P.send_queue) P.send_queue->idle(false);
      } catch (...) {
        mark_lost(P, std::current_exception());
      }
    }
    if (pending && loop.sweep_due()) {
      for (auto& pp : peers_)
        if (pp && !pp->lost.load()) {
          bool has;
          {
            std::lock_guard<common::SpinThenSleepMutex> g(pp->send_mu);
            has = pp->send->pending();
          }
          if (has) {
            try {
              check_peer(pp->rank);
            } catch (...) {
            }
          }
        }
    }
    const bool gpu_busy = busy && !backend_->is_host();
    if (loop.sleeps_next(moved, gpu_busy))  // no kernel stays armed while nobody watches it
      for (auto& pp : peers_)
        if (pp && pp->send_queue) {
          std::lock_guard<common::SpinThenSleepMutex> g(pp->send_mu);
          pp->send_queue->idle(true);
        }
    loop.idle(moved, pending, gpu_busy, ticket);
  }
}

}  // namespace peerlink::detail
