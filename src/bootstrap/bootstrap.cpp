#include "bootstrap/bootstrap.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <thread>

#include "bootstrap/records.h"
#include "common/format.h"
#include "common/interrupt.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::bootstrap {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t random_nonce() {
  std::random_device rd;
  uint64_t n = (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(Clock::now().time_since_epoch().count());
  return n == 0 ? 1 : n;
}

// Short pause in a rendezvous loop: spin briefly, then sleep (idle costs nothing).
void backoff(int iter) {
  if (iter < 64) return;
  std::this_thread::sleep_for(std::chrono::microseconds(iter < 256 ? 20 : 500));
}

}  // namespace

Bootstrap::Bootstrap(const std::string& unique_id, int rank, int world_size, std::chrono::milliseconds timeout, std::function<void()> interrupt_check)
    : rank_(rank),
      world_(world_size),
      id_prefix_(common::shm_prefix_for(unique_id)),
      interrupt_check_(std::move(interrupt_check)) {
  join(timeout);
  job_prefix_ =
      common::format("{}{:08x}_", id_prefix_, static_cast<unsigned long long>(layout_->nonce & 0xffffffffULL));
  try {
    wait_all_joined(timeout);
  } catch (...) {
    // A failed rendezvous must not leave its segment (the destructor will not run), unless it
    // failed for good while a rank has yet to arrive: then the segment, unowned once we are gone,
    // tells that rank why (check_failed_run), and the last such rank removes it.
    leave();
    if (!awaits_late_ranks()) seg_.unlink();
    throw;
  }
}

Bootstrap::~Bootstrap() {
  leave();
  // After a completed setup the name is already gone; after a failed one it must not linger.
  seg_.unlink();
}

// Returns the rendezvous segment mapped and held (shared flock), creating it when absent, or an
// empty Segment when the caller should look again (lost a creation race, replaced a stale one).
common::Segment Bootstrap::acquire_rendezvous(const std::string& name) {
  const std::string path = "/dev/shm/" + name;
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno != ENOENT)
      throw SysError(common::format("cannot open rendezvous segment {}: {}", name, std::strerror(errno)), errno,
                     "open");
    common::Segment seg = common::Segment::publish_locked(name, sizeof(BootLayout), 0, [&](void* p) {
      auto* l = static_cast<BootLayout*>(p);
      l->world_size = static_cast<uint32_t>(world_);
      l->layout_version = kLayoutVersion;
      l->nonce = random_nonce();
    });
    if (seg.valid()) {
      // A fresh rendezvous: leftovers of a crashed run of this id (owners dead) go now.
      int removed = common::remove_stale_segments(id_prefix_);
      if (removed > 0)
        common::log_line(
            LogLevel::Warn, LogLevel::Warn,
            common::format("removed {} stale SHM segment(s) of a crashed run with prefix {}", removed, id_prefix_));
    }
    return seg;  // empty: someone else published it first; open theirs next time
  }
  struct stat st {};
  fstat(fd, &st);
  auto named_here = [&] {
    struct stat now {};
    return ::stat(path.c_str(), &now) == 0 && now.st_ino == st.st_ino;
  };
  // Nobody holds it: no live process belongs to this rendezvous (a crashed, abandoned or failed
  // run, or a corrupt file). Unless it records the failure of the run this rank is late for, it is
  // stale: remove it and create a fresh one.
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
    if (named_here()) {
      common::Segment held;  // owns fd (and our exclusive lock) once adopted
      try {
        held = common::Segment::adopt_fd(fd, name);
        fd = -1;
      } catch (const Error&) {
        // Not a valid segment: stale whatever it holds.
      }
      if (held.valid()) check_failed_run(held);
      common::log_line(
          LogLevel::Warn, LogLevel::Warn,
          common::format("rank {}: replacing stale rendezvous segment {} (no live rank holds it)", rank_, name));
      ::unlink(path.c_str());
    }
    if (fd >= 0) ::close(fd);
    return common::Segment();
  }
  // Held by a live rank: join it. LOCK_SH fails only while a replacer holds LOCK_EX (then the
  // file was unowned and is going away); once we hold it, nobody can replace it under us.
  if (flock(fd, LOCK_SH | LOCK_NB) != 0 || !named_here()) {
    ::close(fd);
    return common::Segment();
  }
  try {
    return common::Segment::adopt_fd(fd, name);
  } catch (const Error& e) {
    ::close(fd);
    throw Error(
        common::format("rendezvous segment {} is held by a live process but is not a valid segment ({}); is another "
                       "program using the unique id's name?",
                       name, e.what()));
  }
}

void Bootstrap::check_failed_run(common::Segment& seg) {
  if (seg.payload_bytes() != sizeof(BootLayout)) return;
  auto* l = static_cast<BootLayout*>(seg.payload());
  FailureView f;
  try {
    check_layout_header(l, sizeof(BootLayout), world_, kLayoutVersion);
    f = parse_failure(&l->failure, sizeof(FailureRecord), world_);
  } catch (const Error&) {
    return;  // another layout, another world size or a corrupt record: stale
  }
  if (!f.recorded()) return;
  RankSlot& mine = l->slots[rank_];
  if (mine.state.load(std::memory_order_acquire) != kEmpty) return;  // this rank took part: a rerun
  const common::ProcId me = common::self_proc_id();
  if (me.start_time == 0 || me.start_time > f.when_ticks) return;  // started after the failure: a rerun
  // A late rank of the failed run. It counts as arrived and gone, so a rerun of this rank later
  // finds the slot taken and replaces the segment; the last late rank removes the name.
  mine.pid = me.pid;
  mine.start_time = me.start_time;
  mine.state.store(kLeft, std::memory_order_release);
  bool more_late = false;
  for (int r = 0; r < world_; ++r) more_late |= l->slots[r].state.load(std::memory_order_acquire) == kEmpty;
  if (!more_late) seg.unlink();
  throw PeerLostError(common::format(
      "rank {}: the rendezvous of this unique id already failed before this rank arrived: rank {} (pid {}) died "
      "during rendezvous (seen by rank {}); start the job again",
      rank_, f.dead_rank, f.dead_pid, f.seen_by));
}

// Claims this rank's slot. False (with *why_wait set) when the slot is held by a process that died
// or gave up: its rendezvous is failing and will be abandoned, so look again later.
bool Bootstrap::claim_slot(BootLayout* l, Clock::time_point deadline, common::InterruptPoll& interrupt,
                           std::string* why_wait) {
  RankSlot& mine = l->slots[rank_];
  for (int iter = 0;; ++iter) {
    uint32_t expected = kEmpty;
    if (mine.state.compare_exchange_strong(expected, kJoining, std::memory_order_acq_rel)) break;
    if (expected == kJoining && Clock::now() < deadline) {
      // Another process is between its claim and its pid store (microseconds, unless it is
      // preempted). Wait for it holding the segment: letting go, the job could form and remove the
      // name before we looked again, and this rank would time out in a fresh rendezvous instead of
      // learning that its rank is taken.
      interrupt.poll();
      backoff(iter);
      continue;
    }
    if (expected == kJoined && common::process_alive({mine.pid, mine.start_time}))
      throw InvalidArgument(
          common::format("rank {} of this unique id is already taken by live pid {} (two processes with the same rank, "
                         "or two jobs with the same unique id at once?)",
                         rank_, mine.pid));
    *why_wait = expected == kJoining
                    ? common::format("rank {}'s slot is being claimed by another process", rank_)
                    : common::format("rank {}'s slot is held by pid {}, which {} in an earlier run of this id", rank_,
                                     mine.pid, expected == kLeft ? "gave up" : "died");
    return false;
  }
  common::ProcId me = common::self_proc_id();
  mine.pid = me.pid;
  mine.start_time = me.start_time;
  mine.state.store(kJoined, std::memory_order_release);
  return true;
}

void Bootstrap::join(std::chrono::milliseconds timeout) {
  const std::string name = id_prefix_ + "boot";
  const auto deadline = Clock::now() + timeout;
  common::InterruptPoll interrupt(interrupt_check_);
  std::string why_wait;
  for (int iter = 0;; ++iter) {
    interrupt.poll();  // only here: every iteration that goes on owns nothing yet
    if (Clock::now() > deadline)
      throw TimeoutError(common::format("rank {}: could not join rendezvous segment {} within {} ms{}", rank_, name,
                                        timeout.count(), why_wait.empty() ? "" : ": " + why_wait));
    common::Segment seg = acquire_rendezvous(name);
    if (!seg.valid()) { backoff(iter); continue; }
    if (seg.payload_bytes() != sizeof(BootLayout))
      throw Error(common::format("rendezvous segment {} has {} bytes, expected {} (another peerlink version?)", name,
                                 seg.payload_bytes(), sizeof(BootLayout)));
    auto* l = static_cast<BootLayout*>(seg.payload());
    check_layout_header(l, sizeof(BootLayout), world_, kLayoutVersion);
    if (!claim_slot(l, deadline, interrupt, &why_wait)) {  // drops our hold: the failing run can then go away
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    seg_ = std::move(seg);
    layout_ = l;
    return;
  }
}

std::string Bootstrap::missing_ranks(const std::vector<int>& missing) const {
  std::string s;
  for (size_t i = 0; i < missing.size(); ++i) s += (i ? ", " : "") + std::to_string(missing[i]);
  return s;
}

void Bootstrap::wait_all_joined(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto next_liveness = Clock::now() + kLivenessInterval;
  common::InterruptPoll interrupt(interrupt_check_);
  for (int iter = 0;; ++iter) {
    // Another rank saw the rendezvous fail for good: no reason to wait for the liveness check.
    const FailureView failed = parse_failure(&layout_->failure, sizeof(FailureRecord), world_);
    if (failed.recorded())
      throw PeerLostError(common::format("rank {} (pid {}) died during rendezvous (seen by rank {})", failed.dead_rank,
                                         failed.dead_pid, failed.seen_by));
    std::vector<int> missing, gave_up;
    const bool check_alive = Clock::now() >= next_liveness;
    if (check_alive) next_liveness = Clock::now() + kLivenessInterval;
    for (int r = 0; r < world_; ++r) {
      const RankSlot& s = layout_->slots[r];
      uint32_t st = s.state.load(std::memory_order_acquire);
      if (st == kEmpty || st == kJoining) {
        missing.push_back(r);
      } else if (st == kLeft) {
        gave_up.push_back(r);  // its own rendezvous failed; reported with the missing ones
      } else if (st != kJoined && st != kLeft) {
        throw Error(common::format("rendezvous: rank {}'s slot has invalid state {} (corrupted segment)", r, st));
      } else if (r != rank_ && check_alive && !common::process_alive({s.pid, s.start_time})) {
        rendezvous_peer_lost(r);
      }
    }
    if (missing.empty() && gave_up.empty()) {
      // Everyone is here: what the others wrote into their slots must make sense before any
      // layer above reads it (typed error for a corrupt segment, never a wild read later).
      for (int r = 0; r < world_; ++r) parse_slot(&layout_->slots[r], sizeof(RankSlot), r, world_);
      return;
    }
    interrupt.poll();  // the constructor's catch leaves and unlinks
    if (Clock::now() > deadline)
      throw TimeoutError(
          common::format("rank {}: rendezvous timed out after {} ms; ranks that never arrived: {}{}", rank_,
                         timeout.count(), missing.empty() ? "none" : missing_ranks(missing),
                         gave_up.empty() ? "" : "; ranks that arrived and gave up: " + missing_ranks(gave_up)));
    backoff(iter);
  }
}

void Bootstrap::rendezvous_peer_lost(int r) {
  const RankSlot& s = layout_->slots[r];
  FailureRecord& f = layout_->failure;
  uint32_t none = kNoFailure;
  if (f.state.compare_exchange_strong(none, kFailureRecording, std::memory_order_acq_rel)) {
    f.dead_rank = r;
    f.dead_pid = s.pid;
    f.seen_by = rank_;
    f.when_ticks = common::ticks_since_boot();
    f.state.store(kFailureRecorded, std::memory_order_release);
  }
  throw PeerLostError(common::format("rank {} (pid {}) died during rendezvous", r, s.pid));
}

bool Bootstrap::awaits_late_ranks() const {
  if (!layout_ || layout_->failure.state.load(std::memory_order_acquire) != kFailureRecorded) return false;
  for (int r = 0; r < world_; ++r)
    if (layout_->slots[r].state.load(std::memory_order_acquire) == kEmpty) return true;
  return false;
}

bool Bootstrap::peer_left(int r) const {
  return layout_->slots[r].state.load(std::memory_order_acquire) == kLeft;
}

bool Bootstrap::peer_alive(int r) const {
  const RankSlot& s = layout_->slots[r];
  return s.state.load(std::memory_order_acquire) == kJoined && common::process_alive({s.pid, s.start_time});
}

void Bootstrap::mark_out_of_step(int reason) {
  int none = 0;
  out_of_step_.compare_exchange_strong(none, reason, std::memory_order_acq_rel);
  interrupted_.store(true, std::memory_order_release);
}

std::string Bootstrap::out_of_step_reason() const {
  switch (out_of_step_.load(std::memory_order_acquire)) {
    case 1: return "interrupted";
    case 2: return "timed out";
    case 3: return "lost a peer";
    default: return interrupted() ? "interrupted" : "";
  }
}

void Bootstrap::check_interrupt() {
  if (!interrupt_check_) return;
  try {
    interrupt_check_();
  } catch (...) {
    mark_out_of_step(1);
    throw;
  }
}

// A rank found dead in a barrier: its host allocations (segments "<job>r<r>_...") are removed now
// rather than at the next run of this id; remove_stale_segments checks each one's owner is dead,
// so nothing a live process (e.g. a reused pid) owns is touched.
void Bootstrap::barrier_peer_lost(int r) {
  bool left = peer_left(r);
  if (!left) common::remove_stale_segments(common::format("{}r{}_", job_prefix_, r));
  mark_out_of_step(3);
  throw PeerLostError(common::format("barrier: rank {} (pid {}) {}", r, layout_->slots[r].pid,
                                     left ? "closed its communicator" : "died"));
}

void Bootstrap::barrier(std::chrono::milliseconds timeout) {
  // Once a barrier of this rank failed after publishing its arrival, the ranks disagree on how
  // many barriers ran: another one would pair our k+1 with their k. Refuse instead.
  if (interrupted())
    throw Error(
        common::format("barrier on rank {}: an earlier barrier or collective wait {}, so the ranks no longer agree on "
                       "how many ran; close the communicator",
                       rank_, out_of_step_reason()));
  uint64_t k = ++barrier_count_;
  layout_->slots[rank_].barrier_count.store(k, std::memory_order_release);
  for (int r = 0; r < world_; ++r) layout_->barrier_bell[r].ring();
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  auto next_liveness = start + kLivenessInterval;
  common::InterruptPoll interrupt(interrupt_check_);
  for (int iter = 0;; ++iter) {
    std::vector<int> missing;
    for (int r = 0; r < world_; ++r)
      if (layout_->slots[r].barrier_count.load(std::memory_order_acquire) < k) missing.push_back(r);
    if (missing.empty()) return;
    try {
      interrupt.poll();
    } catch (...) {
      // Our arrival at barrier k is published and cannot be taken back: peers may pass it
      // without us, and a retried barrier would be our k+1 against their k.
      mark_out_of_step(1);
      throw;
    }
    const auto now = Clock::now();
    if (now >= next_liveness) {  // time-based: the loop below sleeps up to kSleep per round
      next_liveness = now + kLivenessInterval;
      for (int r : missing)
        if (!peer_alive(r)) barrier_peer_lost(r);
    }
    if (now > deadline) {
      mark_out_of_step(2);  // same as an interruption: our arrival stays published
      throw TimeoutError(common::format("barrier timed out after {} ms on rank {}; ranks that did not arrive: {}",
                                        timeout.count(), rank_, missing_ranks(missing)));
    }
    if (iter > 64) {
      // Sleep on our own doorbell: peers ring everyone's when they arrive.
      constexpr auto kSleep = std::chrono::milliseconds(20);
      uint32_t t = layout_->barrier_bell[rank_].prepare();
      if (layout_->slots[missing[0]].barrier_count.load(std::memory_order_acquire) < k)
        layout_->barrier_bell[rank_].wait(t, kSleep);
    }
  }
}

void Bootstrap::allgather(const void* mine, size_t bytes, void* all, std::chrono::milliseconds timeout) {
  if (bytes > kAllgatherBytes)
    throw InvalidArgument(common::format("allgather of {} bytes exceeds the {}-byte slot", bytes, kAllgatherBytes));
  // Nobody may overwrite their slot while a slower rank still reads the previous round.
  barrier(timeout);
  std::memcpy(layout_->allgather[rank_], mine, bytes);
  barrier(timeout);
  for (int r = 0; r < world_; ++r) std::memcpy(static_cast<char*>(all) + r * bytes, layout_->allgather[r], bytes);
  ++allgather_count_;
}

void Bootstrap::leave() {
  if (left_ || !layout_) return;
  left_ = true;
  layout_->slots[rank_].state.store(kLeft, std::memory_order_release);
  // The transport rings its own doorbells when it closes (Transport::close).
  for (int r = 0; r < world_; ++r) layout_->barrier_bell[r].ring();
}

}  // namespace peerlink::bootstrap
