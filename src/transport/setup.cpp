// Transport setup and teardown: join information through the bootstrap's allgather, the
// transport's control segment (doorbells), per-pair segments, the done_seq channel handshake with
// its ring fallback, relay staging rings, the links, and the workers. Every name created here is
// unlinked as soon as every process that maps it has done so.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/format.h"
#include "common/interrupt.h"
#include "common/log.h"
#include "config/test_hooks.h"
#include "peerlink/errors.h"
#include "peerlink/topology.h"
#include "transport/links.h"
#include "transport/path_policy.h"
#include "transport/transport.h"
#include "transport/wire.h"

namespace peerlink::detail {

// One limit of ranks per job: the transport's per-peer tables are sized by the bootstrap's.
static_assert(kMaxPeers == bootstrap::kMaxRanks, "transport kMaxPeers must equal bootstrap::kMaxRanks");
namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

}  // namespace

Transport::Transport(const std::string& unique_id, int rank, int world, int device, const Options& opts)
    : rank_(rank), world_(world), device_(device), opts_(opts) {
  // The bootstrap carries no transport state: join information goes through its allgather.
  boot_ = std::make_unique<bootstrap::Bootstrap>(unique_id, rank, world, opts.timeout, opts.interrupt_check);
  gpu::BackendOptions bo;
  bo.job_prefix = boot_->job_prefix();
  bo.host_fd = opts.host_fd;
  bo.host_chunk_bytes = opts.host_chunk_bytes;
  bo.fd_passing = static_cast<common::FdPassing>(opts.fd_passing);  // same order (options.h, fd_pass.h)
  bo.timeout_ms = static_cast<int>(std::min<long long>(opts.timeout.count(), INT32_MAX));
  bo.log_level = opts.log_level;
  bo.arm_window_us = opts.host_arm_us;
  backend_ = gpu::make_backend(device, common::format("{}r{}_", boot_->job_prefix(), rank), bo);
  ipc_ = std::make_unique<IpcManager>(*backend_, common::self_proc_id(), rank);
  try {
    setup_links();
  } catch (...) {
    // A timeout, a lost peer or the interruption hook: the destructor will not run, so unpin and
    // leave here; the members' destructors then unmap and unlink every segment we created. What a
    // peer that died during setup created goes too (owner-checked: only dead owners' names).
    shutdown();
    common::remove_stale_segments(boot_->job_prefix());
    throw;
  }
  running_ = true;
  send_thread_ = std::thread([this] { send_worker_main(); });
  recv_thread_ = std::thread([this] { recv_worker_main(); });
}

Transport::~Transport() { shutdown(); }

void Transport::exchange_join_info(std::vector<std::string>& bus_ids, std::vector<Completion>& prefs) {
  JoinRecord mine;
  mine.magic = kJoinMagic;
  mine.version = kJoinVersion;
  mine.device = device_;
  mine.completion_pref = static_cast<uint32_t>(opts_.completion);
  if (device_ >= 0) std::snprintf(mine.pci_bus_id, sizeof mine.pci_bus_id, "%s", gpu::pci_bus_id(device_).c_str());
  std::vector<char> all(world_ * sizeof(JoinRecord));
  boot_->allgather(&mine, sizeof mine, all.data(), opts_.timeout);
  bus_ids.assign(world_, "");
  prefs.assign(world_, Completion::Auto);
  for (int r = 0; r < world_; ++r) {
    JoinRecord j = parse_join(all.data() + r * sizeof(JoinRecord), sizeof(JoinRecord), r);
    bus_ids[r] = j.device >= 0 ? std::string(j.pci_bus_id) : "";
    prefs[r] = static_cast<Completion>(j.completion_pref);
  }
}

// Rank 0 creates the control segment; every other rank maps it after the next barrier and counts
// itself in `mapped`; whoever completes the count removes the name.
void Transport::create_control_segment() {
  if (rank_ != 0) return;
  ctl_seg_ =
      common::Segment::create(common::format("{}ctl", boot_->job_prefix()), sizeof(ControlLayout), boot_->nonce(),
                              [](void* m) { static_cast<ControlLayout*>(m)->mapped.value.store(1); });
  ctl_seg_.set_unlink_on_destroy(true);
  ctl_ = static_cast<ControlLayout*>(ctl_seg_.payload());
  if (world_ == 1) ctl_seg_.unlink();
}

void Transport::setup_links() {
  std::vector<std::string> bus_ids;
  std::vector<Completion> prefs;
  exchange_join_info(bus_ids, prefs);
  choose_peer_paths(bus_ids);
  create_owned_segments();
  boot_->barrier(opts_.timeout);
  map_peer_segments();
  decide_completion(prefs);
  for (int p = 0; p < world_; ++p)
    if (p != rank_) build_links(*peers_[p]);
  boot_->barrier(opts_.timeout);
  // Everyone has mapped everything: ours are gone already unless a peer could not remove them.
  // The rendezvous name stays while the job lives, so a second process claiming a rank of it is
  // told the rank is taken (InvalidArgument naming its pid) instead of timing out alone in a fresh
  // rendezvous; it goes when the first rank closes (shutdown). Removed here, the duplicate timed
  // out in the 2nd of 200 runs of three processes claiming ranks 0, 1, 1.
  for (auto& p : peers_)
    if (p) p->in_seg.unlink(), p->relay_out_seg.unlink();
}

// Paths: each rank states which peers it wants relayed; a pair relays when either side asks.
void Transport::choose_peer_paths(const std::vector<std::string>& bus_ids) {
  std::vector<PathChoice> choices = choose_paths(opts_, rank_, bus_ids);
  uint64_t mask = 0;
  for (int p = 0; p < world_; ++p)
    if (p != rank_ && choices[p].path == Path::Relay) mask |= uint64_t(1) << p;
  if (device_ >= 0 && opts_.log_level >= LogLevel::Info)
    common::log_line(LogLevel::Info, opts_.log_level, common::format("topology:\n{}", topology::explain(opts_)));
  std::vector<uint64_t> masks(world_);
  boot_->allgather(&mask, sizeof mask, masks.data(), opts_.timeout);

  peers_.resize(world_);
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    auto peer = std::make_unique<Peer>();
    peer->rank = p;
    bool relay = ((mask >> p) & 1) || ((masks[p] >> rank_) & 1);
    peer->path = relay ? Path::Relay : Path::Direct;
    peer->nvlink = !relay && choices[p].nvlink;
    peer->same_process = boot_->slot(p).pid == int32_t(::getpid());
    peer->path_reason = ((masks[p] >> rank_) & 1) && !((mask >> p) & 1)
                            ? common::format("rank {} asked to relay (here: {})", p, choices[p].reason)
                            : choices[p].reason;
    // A GPU pair relayed by the topology (not by a setting) is slow and worth a warning with its reason.
    const bool surprising = relay && !bus_ids[p].empty() && !bus_ids[rank_].empty() && opts_.path != Path::Relay &&
                            !opts_.p2p_disable;
    common::log_line(surprising ? LogLevel::Warn : LogLevel::Info, opts_.log_level,
                     common::format("rank {} <-> {}: {} ({})", rank_, p, to_string(peer->path), peer->path_reason));
    peers_[p] = std::move(peer);
  }
  // Only the job's ranks may fetch this process's exported descriptors (and only theirs are opened).
  std::vector<int32_t> pids(world_, 0);  // by rank; 0 = this rank (no peer)
  for (int p = 0; p < world_; ++p)
    if (p != rank_) pids[p] = boot_->slot(p).pid;
  backend_->set_peer_pids(pids);
}

// What this rank owns: the control segment (rank 0), the pair segment it receives on, the channel
// when it is the lower rank, the relay ring it sends into.
void Transport::create_owned_segments() {
  const std::string& pre = boot_->job_prefix();
  create_control_segment();
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    Peer& P = *peers_[p];
    P.in_seg = common::Segment::create(common::format("{}pair_{}_{}", pre, p, rank_), PairView::bytes(), boot_->nonce(),
                                       [](void* m) { PairView::init(m); });
    P.in_seg.set_unlink_on_destroy(true);
    P.env.in = PairView::attach(P.in_seg.payload());
    if (rank_ < p) {
      P.chan_seg =
          common::Segment::create(common::format("{}ch_{}_{}", pre, rank_, p), sizeof(ChannelLayout), boot_->nonce());
      P.chan_seg.set_unlink_on_destroy(true);
    }
    if (P.path == Path::Relay) create_relay_out(P);
  }
}

void Transport::create_relay_out(Peer& P) {
  uint64_t slots = static_cast<uint64_t>(opts_.relay_slots), chunk = opts_.relay_chunk_bytes;
  P.relay_out_seg = common::Segment::create(common::format("{}relay_{}_{}", boot_->job_prefix(), rank_, P.rank),
                                            RelayView::bytes(slots, chunk), boot_->nonce(), [&](void* m) {
                                              auto* h = static_cast<RelayHeader*>(m);
                                              h->slots = slots;
                                              h->chunk_bytes = chunk;
                                            });
  P.relay_out_seg.set_unlink_on_destroy(true);
  auto* h = static_cast<RelayHeader*>(P.relay_out_seg.payload());
  P.relay_out = RelayView{h, static_cast<char*>(P.relay_out_seg.payload()) + RelayView::data_offset(), slots, chunk};
  backend_->pin(P.relay_out.data, slots * chunk);
}

// The peers' segments (after the barrier that follows their creation). Each has exactly one other
// process mapping it (this one), so the name goes right after mapping: a crash from here on leaves
// no name behind.
void Transport::map_peer_segments() {
  const std::string& pre = boot_->job_prefix();
  if (rank_ != 0) {
    std::string cn = common::format("{}ctl", pre);
    ctl_seg_ = common::Segment::open(cn);
    if (!ctl_seg_.valid() || ctl_seg_.payload_bytes() != sizeof(ControlLayout)) missing_segment(cn, 0, "control");
    ctl_ = static_cast<ControlLayout*>(ctl_seg_.payload());
    if (ctl_->mapped.value.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint64_t>(world_))
      ctl_seg_.unlink();
  }
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    Peer& P = *peers_[p];
    std::string name = common::format("{}pair_{}_{}", pre, rank_, p);
    P.out_seg = common::Segment::open(name);
    if (!P.out_seg.valid() || P.out_seg.payload_bytes() != PairView::bytes()) missing_segment(name, p, "pair");
    P.out_seg.unlink();
    P.env.out = PairView::attach(P.out_seg.payload());
    if (P.path == Path::Relay) map_relay_in(P);
    P.send_queue = backend_->make_queue(std::max(1, opts_.stripe_streams));
    P.recv_queue = backend_->make_queue(1);
  }
}

void Transport::map_relay_in(Peer& P) {
  std::string rn = common::format("{}relay_{}_{}", boot_->job_prefix(), P.rank, rank_);
  P.relay_in_seg = common::Segment::open(rn);
  if (!P.relay_in_seg.valid()) missing_segment(rn, P.rank, "relay");
  P.relay_in_seg.unlink();
  auto* h = static_cast<RelayHeader*>(P.relay_in_seg.payload());
  uint64_t slots = h->slots, chunk = h->chunk_bytes;  // untrusted geometry: it must fit what we mapped
  check_relay_geometry(slots, chunk, P.relay_in_seg.payload_bytes(), rn);
  P.relay_in = RelayView{h, static_cast<char*>(P.relay_in_seg.payload()) + RelayView::data_offset(), slots, chunk};
  backend_->pin(P.relay_in.data, slots * chunk);
}

void Transport::missing_segment(const std::string& name, int owner, const char* what) {
  if (!boot_->peer_alive(owner))
    throw PeerLostError(common::format("rank {}{} during setup (its {} segment {} is gone)", owner,
                                       boot_->peer_left(owner) ? " gave up" : " died", what, name));
  throw Error(
      common::format("rank {}: {} segment {} of rank {} is missing or has the wrong size", rank_, what, name, owner));
}

// The done_seq channel handshake. The higher rank opens the lower rank's channel and sets
// opener_ready; the lower rank waits a bounded time for it (ended at once by the peer's death) and
// decides; the decisions reach every rank through one allgather, so the two sides of a pair can
// never disagree.
void Transport::decide_completion(const std::vector<Completion>& prefs) {
  const std::string& pre = boot_->job_prefix();
  for (int p = 0; p < rank_; ++p) {  // higher rank: open, announce readiness, remove the name
    Peer& P = *peers_[p];
    bool wants_ring = prefs[rank_] == Completion::Ring || prefs[p] == Completion::Ring;
    if (wants_ring || test_hooks(opts_).channel_never_ready) continue;
    P.chan_seg = common::Segment::open(common::format("{}ch_{}_{}", pre, p, rank_));
    if (P.chan_seg.valid() && P.chan_seg.payload_bytes() == sizeof(ChannelLayout)) {
      static_cast<ChannelLayout*>(P.chan_seg.payload())->opener_ready.value.store(1, std::memory_order_release);
      P.chan_seg.unlink();
    }
  }
  // Lower rank decides for each higher peer.
  std::vector<uint8_t> row(kMaxPeers, kDecisionPending);
  const auto deadline = Clock::now() + opts_.channel_ready_timeout;
  common::InterruptPoll interrupt(opts_.interrupt_check);
  for (int p = rank_ + 1; p < world_; ++p) {
    Peer& P = *peers_[p];
    Completion a = prefs[rank_], b = prefs[p];
    uint8_t decision;
    if (a == Completion::Ring || b == Completion::Ring) {
      decision = (a == Completion::DoneSeq || b == Completion::DoneSeq) ? kDecisionFailed : kDecisionRing;
    } else {
      auto* ch = static_cast<ChannelLayout*>(P.chan_seg.payload());
      for (int iter = 0; ch->opener_ready.value.load(std::memory_order_acquire) == 0 && Clock::now() < deadline; ++iter) {
        interrupt.poll();
        if (iter % 128 == 127 && !boot_->peer_alive(p))  // every ~25 ms: a dead peer ends the wait now
          throw PeerLostError(
              common::format("rank {}{} during setup (while rank {} waited for it to open the done_seq channel)", p,
                             boot_->peer_left(p) ? " gave up" : " died", rank_));
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      bool ready = ch->opener_ready.value.load(std::memory_order_acquire) != 0;
      bool forced = a == Completion::DoneSeq || b == Completion::DoneSeq;
      decision = ready ? kDecisionDoneSeq : forced ? kDecisionFailed : kDecisionRing;
      if (!ready)
        common::log_line(LogLevel::Warn, opts_.log_level,
                         common::format("rank {} <-> {}: done_seq channel not ready after {} ms; {}", rank_, p,
                                        opts_.channel_ready_timeout.count(),
                                        forced ? "done_seq was forced" : "both sides use the SHM ring with ACK"));
    }
    P.chan_seg.unlink();  // decided: the opener has mapped it, or never will
    row[p] = decision;
  }
  std::vector<uint8_t> all(size_t(world_) * kMaxPeers);
  boot_->allgather(row.data(), kMaxPeers, all.data(), opts_.timeout);
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    int lo = std::min(p, rank_), hi = std::max(p, rank_);
    uint8_t d = all[size_t(lo) * kMaxPeers + hi];
    if (d != kDecisionDoneSeq && d != kDecisionRing && d != kDecisionFailed)
      throw Error(common::format("rank {}: rank {} published no valid completion decision for pair ({}, {}): {}", rank_,
                                 lo, lo, hi, int(d)));
    if (d == kDecisionFailed)
      throw Error(
          common::format("pair ({}, {}): PEERLINK_COMPLETION=done_seq was requested but the done_seq channel could not "
                         "be set up (or the other side forces ring)",
                         lo, hi));
    Peer& P = *peers_[p];
    P.completion = d == kDecisionDoneSeq ? Completion::DoneSeq : Completion::Ring;
    if (P.completion == Completion::DoneSeq && !backend_->is_host() && P.path == Path::Direct) {
      backend_->pin(P.chan_seg.payload(), 4096);  // the copy stream stores done_seq here
      P.chan_pinned = true;
    }
  }
}

// The one place where a pair's path and completion choose its links.
void Transport::build_links(Peer& P) {
  P.env.peer = P.rank;
  P.env.opts = &opts_;
  P.env.ipc = ipc_.get();
  P.env.counters = &counters;
  P.env.peer_recv_bell = &ctl_->recv_bell[P.rank];
  P.env.peer_send_bell = &ctl_->send_bell[P.rank];
  P.env.peer_wait_bell = &ctl_->wait_bell[P.rank];
  LinkResources res;
  res.send_queue = P.send_queue.get();
  res.recv_queue = P.recv_queue.get();
  if (P.completion == Completion::DoneSeq) {
    auto* ch = static_cast<ChannelLayout*>(P.chan_seg.payload());
    res.done_out = rank_ < P.rank ? &ch->done_lo_to_hi : &ch->done_hi_to_lo;
    res.done_in = rank_ < P.rank ? &ch->done_hi_to_lo : &ch->done_lo_to_hi;
  }
  res.chan_pinned = P.chan_pinned;
  res.relay_out = P.relay_out;
  res.relay_in = P.relay_in;
  PairLinks l = make_links(P.path, P.completion, P.env, P.pubs, res);
  P.send = std::move(l.send);
  P.recv = std::move(l.recv);
  if (P.recv->completes_on_caller())
    P.recv_progress = std::make_shared<PairProgress>(*this, P, PairProgress::Side::Recv, ctl_->wait_bell[rank_]);
  // Host memory: the caller already copies and publishes its sends (submit_send); waiting for the
  // reply (an ACK) on the same thread spares two wake-ups. GPU send links poll copy events, which
  // stays with the send worker.
  if (backend_->is_host())
    P.send_progress = std::make_shared<PairProgress>(*this, P, PairProgress::Side::Send, ctl_->wait_bell[rank_]);
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
    if (!boot_->peer_left(peer)) common::remove_stale_segments(common::format("{}r{}_", boot_->job_prefix(), peer));
    mark_lost(P,
              std::make_exception_ptr(PeerLostError(common::format(
                  "rank {} (pid {}) {}", peer, s.pid, boot_->peer_left(peer) ? "closed its communicator" : "died"))));
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

void Transport::shutdown() {
  if (shut_.exchange(true)) return;
  // Waiting threads stop driving the links themselves before anything goes; those asleep on our
  // wait bell wake and sleep on their requests' status from then on.
  for (auto& p : peers_) {
    if (p && p->recv_progress) p->recv_progress->close_begin();
    if (p && p->send_progress) p->send_progress->close_begin();
  }
  if (ctl_) ctl_->wait_bell[rank_].ring();
  for (auto& p : peers_) {
    if (p && p->recv_progress) p->recv_progress->close_wait();
    if (p && p->send_progress) p->send_progress->close_wait();
  }
  running_ = false;
  wake_send_worker();
  wake_recv_worker();
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
  if (boot_) boot_->leave(), boot_->unlink_name();  // new jobs with this id start clean
  if (ctl_)  // peers sleeping on their doorbells notice our departure now
    for (int r = 0; r < world_; ++r) ctl_->recv_bell[r].ring(), ctl_->send_bell[r].ring(), ctl_->wait_bell[r].ring();
  if (ipc_) ipc_->close_all();
  for (auto& p : peers_)
    if (p) {
      std::lock_guard<common::SpinThenSleepMutex> gs(p->send_mu);
      std::lock_guard<common::SpinThenSleepMutex> gr(p->recv_mu);
      p->send.reset();  // links refer to the queues: they go first
      p->recv.reset();
      p->send_queue.reset();
      p->recv_queue.reset();
    }
}

}  // namespace peerlink::detail
