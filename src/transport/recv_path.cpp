// Receive side: buffer publication (notify / wait), revocation (free_memory), irecv, and the
// receive worker, which drives every pair's receive link.
#include <sched.h>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "transport/registry.h"
#include "transport/transport.h"
#include "transport/worker_loop.h"

namespace peerlink::detail {

void Transport::notify(int peer, uint32_t buf_id, void* ptr, size_t len, uint64_t version) {
  rethrow_worker_error();
  if (!ptr) throw InvalidArgument(common::format("notify_ipc_buffer(peer {}, buffer {}): ptr is null", peer, buf_id));
  if (len == 0) throw InvalidArgument(common::format("notify_ipc_buffer(peer {}, buffer {}): len is 0", peer, buf_id));
  if (version == 0)
    throw InvalidArgument(common::format("notify_ipc_buffer(peer {}, buffer {}): version must be > 0", peer, buf_id));
  Peer& P = *peers_[peer];
  std::lock_guard<std::mutex> g(P.pubs.mu);
  auto it = P.pubs.by_id.find(buf_id);
  if (it != P.pubs.by_id.end()) {
    LocalPublication& cur = it->second;
    if (!cur.revoked && cur.version == version && cur.ptr == ptr && cur.len == len) return;  // same triple: no-op
    if (version < cur.version)
      throw InvalidArgument(
          common::format("notify_ipc_buffer(peer {}, buffer {}): stale version {}; version {} is already published",
                         peer, buf_id, version, cur.version));
    if (version == cur.version)
      throw InvalidArgument(common::format(
          "notify_ipc_buffer(peer {}, buffer {}): version {} is already published with a different pointer/length ({}, "
          "{} bytes{}); publish a new version",
          peer, buf_id, version, static_cast<void*>(cur.ptr), cur.len, cur.revoked ? ", since freed" : ""));
  }
  Publication pub;
  pub.buf_id = buf_id;
  pub.version = version;
  pub.len = len;
  pub.handle = ipc_->export_range(ptr, len, &pub.offset);  // validates memory; may throw
  RegSlot* slot = it != P.pubs.by_id.end() ? it->second.slot : registry_slot_for_write(P.env.in.reg, buf_id);
  if (!slot)
    throw InvalidArgument(common::format(
        "notify_ipc_buffer(peer {}, buffer {}): registry full ({} buffer ids per peer)", peer, buf_id, kRegSlots));
  registry_write(slot, pub);
  P.pubs.by_id[buf_id] = LocalPublication{static_cast<char*>(ptr), len, version, slot, false};
}

void Transport::wait_buffer(int peer, uint32_t buf_id, uint64_t min_version) {
  rethrow_worker_error();
  if (min_version == 0)
    throw InvalidArgument(common::format("wait_ipc_buffer(peer {}, buffer {}): min_version must be > 0", peer, buf_id));
  Publication pub = wait_publication(peer, buf_id, min_version, "wait_ipc_buffer");
  if (peers_[peer]->path == Path::Direct) ipc_->bind(peer, pub);  // the first send pays nothing
}

Request Transport::irecv(int peer, uint32_t buf_id, size_t offset, size_t len) {
  rethrow_worker_error();
  check_peer(peer);
  Peer& P = *peers_[peer];
  if (offset > SIZE_MAX - len)
    throw InvalidArgument(common::format("irecv from rank {}: offset {} + len {} overflows", peer, offset, len));
  {
    std::lock_guard<std::mutex> g(P.pubs.mu);
    auto it = P.pubs.by_id.find(buf_id);
    if (it == P.pubs.by_id.end() || it->second.revoked)
      throw InvalidArgument(common::format("irecv from rank {}: unknown buffer id {}{}", peer, buf_id,
                                           it == P.pubs.by_id.end() ? " (publish it with notify_ipc_buffer first)"
                                                                    : " (its memory was freed; publish it again)"));
    if (offset + len > it->second.len)
      throw InvalidArgument(common::format("irecv from rank {}: [offset {}, +len {}) exceeds buffer {} of {} bytes",
                                           peer, offset, len, buf_id, it->second.len));
  }
  RecvOp r;
  r.buf_id = buf_id;
  r.offset = offset;
  r.len = len;
  std::lock_guard<common::SpinThenSleepMutex> g(P.recv_mu);
  r.seq = ++P.next_recv_seq;
  r.req = new_request("irecv from", peer, buf_id, offset, len, 0, r.seq);
  if (P.recv_progress) {
    r.req->progress = P.recv_progress;
    r.req->bell = P.recv_progress->bell();
  }
  Request out(r.req);
  P.recv->post(std::move(r));
  // A message that is already here completes now; the worker is woken only when it has something to
  // do (a handshake, a relay): arrivals from now on ring it themselves, unless a waiter polls.
  if (P.recv_progress) {
    try {
      P.recv->caller_progress();
    } catch (...) {
      mark_lost(P, std::current_exception());
    }
  }
  if (!P.recv_progress || P.recv->needs_worker_after_post()) wake_recv_worker();
  return out;
}

void Transport::free_memory(void* p) {
  gpu::AllocRange a;
  try {
    a = backend_->find_allocation(p, 1);
  } catch (const Error&) {
    backend_->free(p);  // not ours: the backend names the error
    return;
  }
  if (a.base != p) {
    backend_->free(p);  // inside an allocation but not its start: the backend refuses it
    return;
  }
  const char *lo = a.base, *hi = a.base + a.bytes;
  for (auto& pp : peers_) {
    if (!pp) continue;
    Peer& P = *pp;
    // Under recv_mu the receive worker is not between a destination lookup and its copy.
    std::lock_guard<common::SpinThenSleepMutex> gr(P.recv_mu);
    std::vector<uint32_t> ids;
    {
      std::lock_guard<std::mutex> g(P.pubs.mu);
      for (auto& [id, pub] : P.pubs.by_id) {
        if (pub.revoked || pub.ptr < lo || pub.ptr >= hi) continue;
        registry_revoke(pub.slot);
        pub.revoked = true;
        ids.push_back(id);
      }
    }
    for (uint32_t id : ids)
      P.recv->fail_buffer(
          id, common::format("buffer {} was freed (Communicator::free) while this receive from rank {} was pending", id,
                             P.rank)
                  .c_str());
    if (!ids.empty() && P.recv_queue) P.recv_queue->wait_all();  // relay drains into it in flight
  }
  ipc_->forget_export(a.base);
  backend_->free(p);
}

bool Transport::progress_on_caller(Peer& P, bool recv, bool* lock_taken) noexcept {
  if (P.lost.load(std::memory_order_acquire)) return false;  // the workers fail what is pending
  std::unique_lock<common::SpinThenSleepMutex> g(recv ? P.recv_mu : P.send_mu, std::try_to_lock);
  if (!g.owns_lock()) {
    if (lock_taken) *lock_taken = true;
    return false;
  }
  try {
    if (recv) return P.recv && P.recv->caller_progress();
    return P.send && P.send->progress();
  } catch (...) {
    g.unlock();
    try {
      mark_lost(P, std::current_exception());  // as the worker would: the pair fails
    } catch (...) {
    }
    return true;
  }
}

void Transport::note_cpu() noexcept {
  const int cpu = sched_getcpu();
  if (cpu >= 0) ctl_->cpu[rank_].value.store(uint64_t(cpu) + 1, std::memory_order_relaxed);
}

bool Transport::peer_on_this_cpu(Peer& P) noexcept {
  const int cpu = sched_getcpu();
  if (cpu < 0) return false;
  ctl_->cpu[rank_].value.store(uint64_t(cpu) + 1, std::memory_order_relaxed);
  return ctl_->cpu[P.rank].value.load(std::memory_order_relaxed) == uint64_t(cpu) + 1;
}

void Transport::check_peer_quietly(Peer& P) noexcept {
  try {
    check_peer(P.rank);
  } catch (...) {
  }
}

void Transport::fail_pending_recvs(Peer& P, std::exception_ptr e) {
  std::lock_guard<common::SpinThenSleepMutex> g(P.recv_mu);
  if (P.recv) P.recv->fail_all(e);
}

void Transport::recv_worker_main() {
  backend_->bind_worker_thread();  // the copy queue's device guards then switch nothing
  WorkerLoop loop(ctl_->recv_bell[rank_], backend_->is_host());
  while (running_.load(std::memory_order_acquire)) {
    uint32_t ticket = loop.prepare();
    bool moved = false, pending = false, busy = false;
    bool sweep = loop.sweep_due();
    for (auto& pp : peers_) {
      if (!pp) continue;
      Peer& P = *pp;
      if (P.lost.load(std::memory_order_acquire)) {
        try {  // deliver what the peer signalled before it went, then fail the rest
          std::lock_guard<common::SpinThenSleepMutex> g(P.recv_mu);
          P.recv->progress();
        } catch (...) {
        }
        fail_pending_recvs(P, P.lost_error);
        continue;
      }
      try {
        std::lock_guard<common::SpinThenSleepMutex> g(P.recv_mu);
        moved |= P.recv->progress();
        busy |= P.recv->busy();
        pending |= P.recv->pending();
      } catch (...) {
        mark_lost(P, std::current_exception());
      }
    }
    if (sweep && pending) {
      for (auto& pp : peers_) {
        if (!pp || pp->lost.load()) continue;
        bool has;
        {
          std::lock_guard<common::SpinThenSleepMutex> g(pp->recv_mu);
          has = pp->recv->pending();
        }
        if (!has) continue;
        try {
          check_peer(pp->rank);
        } catch (...) {
          // Marked lost: the next round delivers what it signalled, then fails the rest.
        }
      }
    }
    loop.idle(moved, pending, busy && !backend_->is_host(), ticket);
  }
}

}  // namespace peerlink::detail
