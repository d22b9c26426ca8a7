// Transport setup and teardown: rendezvous, per-pair segments, the done_seq channel handshake with
// its ring fallback, relay staging rings, and the workers.
#include <chrono>
#include <thread>

#include "common/interrupt.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "peerlink/topology.h"
#include "transport/path_policy.h"
#include "transport/transport.h"

namespace peerlink::detail {
namespace {

using common::cat;
using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

}  // namespace

Transport::Transport(const std::string& unique_id, int rank, int world, int device, const Options& opts)
    : rank_(rank), world_(world), device_(device), opts_(opts) {
  bootstrap::JoinInfo info;
  info.device = device;
  info.completion_pref = static_cast<int>(opts.completion);
  if (device >= 0) info.pci_bus_id = gpu::pci_bus_id(device);
  boot_ = std::make_unique<bootstrap::Bootstrap>(unique_id, rank, world, info, opts.timeout, opts.interrupt_check);
  backend_ = gpu::make_backend(device, common::cat(boot_->job_prefix(), "r", rank, "_"));
  ipc_ = std::make_unique<IpcManager>(*backend_, common::self_proc_id());
  try {
    setup_links();
  } catch (...) {
    // A timeout, a lost peer or the interruption hook: the destructor will not run, so unpin and
    // leave here; the members' destructors then unmap and unlink every segment we created.
    shutdown();
    throw;
  }
  running_ = true;
  send_thread_ = std::thread([this] { send_worker_main(); });
  recv_thread_ = std::thread([this] { recv_worker_main(); });
}

Transport::~Transport() { shutdown(); }

void Transport::setup_links() {
  auto& L = boot_->layout();
  // 1. Paths: each rank states which peers it wants relayed; a pair relays when either side asks.
  uint64_t mask = 0;
  std::vector<std::string> bus_ids(world_), reasons(world_);
  for (int p = 0; p < world_; ++p) bus_ids[p] = L.slots[p].device >= 0 ? std::string(L.slots[p].pci_bus_id) : "";
  std::vector<PathChoice> choices = choose_paths(opts_, rank_, bus_ids);
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    reasons[p] = choices[p].reason;
    if (choices[p].path == Path::Relay) mask |= uint64_t(1) << p;
  }
  if (device_ >= 0 && opts_.log_level >= LogLevel::Info)
    common::log_line(LogLevel::Info, opts_.log_level, cat("topology:\n", topology::explain(opts_)));
  L.slots[rank_].relay_mask = mask;
  boot_->barrier(opts_.timeout);

  peers_.resize(world_);
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    auto peer = std::make_unique<Peer>();
    peer->rank = p;
    bool relay = ((mask >> p) & 1) || ((L.slots[p].relay_mask >> rank_) & 1);
    peer->path = relay ? Path::Relay : Path::Direct;
    common::log_line(LogLevel::Info, opts_.log_level,
                     cat("rank ", rank_, " <-> ", p, ": ", to_string(peer->path), " (", reasons[p], ")"));
    peers_[p] = std::move(peer);
  }

  // 2. Create what this rank owns: the pair segment it receives on, the channel when it is the
  //    lower rank, the relay ring it sends into.
  const std::string& pre = boot_->job_prefix();
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    Peer& P = *peers_[p];
    P.in_seg = common::Segment::create(cat(pre, "pair_", p, "_", rank_), PairView::bytes(), boot_->nonce(),
                                       [](void* m) { PairView::init(m); });
    P.in_seg.set_unlink_on_destroy(true);
    P.in = PairView::attach(P.in_seg.payload());
    if (rank_ < p) {
      P.chan_seg = common::Segment::create(cat(pre, "ch_", rank_, "_", p), sizeof(ChannelLayout), boot_->nonce());
      P.chan_seg.set_unlink_on_destroy(true);
    }
    if (P.path == Path::Relay) {
      uint64_t slots = static_cast<uint64_t>(opts_.relay_slots), chunk = opts_.relay_chunk_bytes;
      P.relay_out_seg = common::Segment::create(cat(pre, "relay_", rank_, "_", p), RelayView::bytes(slots, chunk),
                                                boot_->nonce(), [&](void* m) {
                                                  auto* h = static_cast<RelayHeader*>(m);
                                                  h->slots = slots;
                                                  h->chunk_bytes = chunk;
                                                });
      P.relay_out_seg.set_unlink_on_destroy(true);
      auto* h = static_cast<RelayHeader*>(P.relay_out_seg.payload());
      P.relay_out = RelayView{h, static_cast<char*>(P.relay_out_seg.payload()) + RelayView::data_offset(), slots, chunk};
      backend_->pin(P.relay_out.data, slots * chunk);
    }
  }
  boot_->barrier(opts_.timeout);

  // 3. Open the peers' segments.
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    Peer& P = *peers_[p];
    std::string name = cat(pre, "pair_", rank_, "_", p);
    P.out_seg = common::Segment::open(name);
    if (!P.out_seg.valid() || P.out_seg.payload_bytes() != PairView::bytes())
      throw Error(cat("rank ", rank_, ": pair segment ", name, " of rank ", p, " is missing or has the wrong size"));
    P.out = PairView::attach(P.out_seg.payload());
    if (P.path == Path::Relay) {
      std::string rn = cat(pre, "relay_", p, "_", rank_);
      P.relay_in_seg = common::Segment::open(rn);
      if (!P.relay_in_seg.valid()) throw Error(cat("relay segment ", rn, " of rank ", p, " is missing"));
      auto* h = static_cast<RelayHeader*>(P.relay_in_seg.payload());
      // Untrusted geometry: it must fit the segment we mapped.
      if (h->slots == 0 || h->slots > 64 || h->chunk_bytes == 0 ||
          RelayView::bytes(h->slots, h->chunk_bytes) > P.relay_in_seg.payload_bytes())
        throw Error(cat("relay segment ", rn, " has invalid geometry: ", h->slots, " slots of ", h->chunk_bytes, " bytes"));
      P.relay_in = RelayView{h, static_cast<char*>(P.relay_in_seg.payload()) + RelayView::data_offset(), h->slots,
                             h->chunk_bytes};
      backend_->pin(P.relay_in.data, h->slots * h->chunk_bytes);
    }
    P.send_queue = backend_->make_queue(std::max(1, opts_.stripe_streams));
    P.recv_queue = backend_->make_queue(1);
  }
  decide_completion();
  boot_->barrier(opts_.timeout);
  // 4. Everyone has mapped everything: remove the names now, so even a crash leaves nothing behind.
  boot_->unlink_name();
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    Peer& P = *peers_[p];
    P.in_seg.unlink();
    P.chan_seg.unlink();
    P.relay_out_seg.unlink();
  }
}

// The done_seq channel handshake. The higher rank opens the lower rank's channel and sets
// opener_ready; the lower rank waits a bounded time for it and publishes the pair's decision in the
// rendezvous segment, which both sides read, so the two sides can never disagree.
void Transport::decide_completion() {
  auto& L = boot_->layout();
  const std::string& pre = boot_->job_prefix();
  auto pref = [&](int r) { return static_cast<Completion>(L.slots[r].completion_pref); };
  for (int p = 0; p < world_; ++p) {
    if (p == rank_ || rank_ < p) continue;  // higher rank: open and announce readiness
    Peer& P = *peers_[p];
    bool wants_ring = pref(rank_) == Completion::Ring || pref(p) == Completion::Ring;
    if (wants_ring || opts_.test_channel_never_ready) continue;
    P.chan_seg = common::Segment::open(cat(pre, "ch_", p, "_", rank_));
    if (P.chan_seg.valid() && P.chan_seg.payload_bytes() == sizeof(ChannelLayout))
      static_cast<ChannelLayout*>(P.chan_seg.payload())->opener_ready.value.store(1, std::memory_order_release);
  }
  // Lower rank decides for each higher peer.
  const auto deadline = Clock::now() + opts_.channel_ready_timeout;
  common::InterruptPoll interrupt(opts_.interrupt_check);
  for (int p = rank_ + 1; p < world_; ++p) {
    Peer& P = *peers_[p];
    Completion a = pref(rank_), b = pref(p);
    uint32_t decision;
    if (a == Completion::Ring || b == Completion::Ring) {
      decision = (a == Completion::DoneSeq || b == Completion::DoneSeq) ? kDecisionFailed : kDecisionRing;
    } else {
      auto* ch = static_cast<ChannelLayout*>(P.chan_seg.payload());
      while (ch->opener_ready.value.load(std::memory_order_acquire) == 0 && Clock::now() < deadline) {
        interrupt.poll();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      bool ready = ch->opener_ready.value.load(std::memory_order_acquire) != 0;
      bool forced = a == Completion::DoneSeq || b == Completion::DoneSeq;
      decision = ready ? kDecisionDoneSeq : forced ? kDecisionFailed : kDecisionRing;
      if (!ready)
        common::log_line(LogLevel::Warn, opts_.log_level,
                         cat("rank ", rank_, " <-> ", p, ": done_seq channel not ready after ",
                             opts_.channel_ready_timeout.count(), " ms; ", forced ? "done_seq was forced" : "both sides use the SHM ring with ACK"));
    }
    L.pair_decision[rank_ * bootstrap::kMaxRanks + p].store(decision, std::memory_order_release);
  }
  // Everyone reads the decisions (bounded).
  const auto read_deadline = Clock::now() + opts_.channel_ready_timeout + opts_.timeout;
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    int lo = std::min(p, rank_), hi = std::max(p, rank_);
    auto& word = L.pair_decision[lo * bootstrap::kMaxRanks + hi];
    uint32_t d;
    while ((d = word.load(std::memory_order_acquire)) == kDecisionPending) {
      if (Clock::now() > read_deadline)
        throw TimeoutError(cat("rank ", rank_, ": rank ", lo, " never decided the completion path of pair (", lo, ", ", hi, ")"));
      if (!boot_->peer_alive(lo)) throw PeerLostError(cat("rank ", lo, " died during setup"));
      interrupt.poll();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (d == kDecisionFailed)
      throw Error(cat("pair (", lo, ", ", hi, "): PEERLINK_COMPLETION=done_seq was requested but the done_seq channel ",
                      "could not be set up (or the other side forces ring)"));
    Peer& P = *peers_[p];
    P.completion = d == kDecisionDoneSeq ? Completion::DoneSeq : Completion::Ring;
    if (P.completion == Completion::DoneSeq) {
      auto* ch = static_cast<ChannelLayout*>(P.chan_seg.payload());
      P.done_out = rank_ < p ? &ch->done_lo_to_hi : &ch->done_hi_to_lo;
      P.done_in = rank_ < p ? &ch->done_hi_to_lo : &ch->done_lo_to_hi;
      if (!backend_->is_host() && P.path == Path::Direct) {
        backend_->pin(P.chan_seg.payload(), 4096);  // the copy stream stores done_seq here
        P.chan_pinned = true;
      }
    }
  }
}

void Transport::check_peer(int peer) {
  Peer& P = *peers_[peer];
  if (P.lost.load(std::memory_order_acquire)) std::rethrow_exception(P.lost_error);
  int64_t now = now_ns();
  if (now - P.last_alive_check_ns.load(std::memory_order_relaxed) < 100000000) return;
  P.last_alive_check_ns.store(now, std::memory_order_relaxed);
  if (!boot_->peer_alive(peer)) {
    const auto& s = boot_->slot(peer);
    // A dead peer cannot unlink its host allocations: the survivors do (owner-checked).
    if (!boot_->peer_left(peer)) common::remove_stale_segments(cat(boot_->job_prefix(), "r", peer, "_"));
    mark_lost(P, std::make_exception_ptr(PeerLostError(
                     cat("rank ", peer, " (pid ", s.pid, ") ", boot_->peer_left(peer) ? "closed its communicator" : "died"))));
    std::rethrow_exception(P.lost_error);
  }
}

void Transport::mark_lost(Peer& p, std::exception_ptr e) {
  if (p.lost.load(std::memory_order_acquire)) return;
  {
    std::lock_guard<std::mutex> g(error_mu_);
    if (p.lost.load(std::memory_order_acquire)) return;
    p.lost_error = e;
    p.lost.store(true, std::memory_order_release);
  }
  wake_send_worker();
  wake_recv_worker();
}

void Transport::rethrow_worker_error() {
  std::lock_guard<std::mutex> g(error_mu_);
  if (worker_error_) std::rethrow_exception(worker_error_);
}

void Transport::wake_send_worker() { boot_->layout().send_bell[rank_].ring(); }
void Transport::wake_recv_worker() { boot_->layout().recv_bell[rank_].ring(); }

void Transport::shutdown() {
  if (shut_) return;
  shut_ = true;
  running_ = false;
  if (boot_) {
    wake_send_worker();
    wake_recv_worker();
  }
  if (send_thread_.joinable()) send_thread_.join();
  if (recv_thread_.joinable()) recv_thread_.join();
  auto closed = std::make_exception_ptr(Error("communicator closed while the request was pending"));
  for (auto& p : peers_) {
    if (!p) continue;
    fail_pending_sends(*p, closed);
    fail_pending_recvs(*p, closed);
    try {
      if (p->send_queue) p->send_queue->wait_all();
      if (p->recv_queue) p->recv_queue->wait_all();
    } catch (...) {
    }
    if (p->chan_pinned) backend_->unpin(p->chan_seg.payload());
    if (p->relay_out.data) backend_->unpin(p->relay_out.data);
    if (p->relay_in.data) backend_->unpin(p->relay_in.data);
  }
  if (boot_) boot_->leave();
  if (ipc_) ipc_->close_all();
  for (auto& p : peers_)
    if (p) {
      p->send_queue.reset();
      p->recv_queue.reset();
    }
}

}  // namespace peerlink::detail
