#include "bootstrap/bootstrap.h"

#include <cstring>
#include <random>
#include <thread>

#include "common/interrupt.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::bootstrap {
namespace {

using common::cat;
using Clock = std::chrono::steady_clock;
constexpr uint32_t kLayoutVersion = 1;

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

Bootstrap::Bootstrap(const std::string& unique_id, int rank, int world_size, const JoinInfo& info,
                     std::chrono::milliseconds timeout, std::function<void()> interrupt_check)
    : rank_(rank),
      world_(world_size),
      id_prefix_(common::shm_prefix_for(unique_id)),
      interrupt_check_(std::move(interrupt_check)) {
  join(info, timeout);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%08llx", static_cast<unsigned long long>(layout_->nonce & 0xffffffffULL));
  job_prefix_ = cat(id_prefix_, hex, "_");
  try {
    wait_all_joined(timeout);
  } catch (...) {
    leave();  // a failed rendezvous must not leave its segment (the destructor will not run)
    seg_.unlink();
    throw;
  }
}

Bootstrap::~Bootstrap() {
  leave();
  // After a completed setup the name is already gone; after a failed one it must not linger.
  seg_.unlink();
}

void Bootstrap::join(const JoinInfo& info, std::chrono::milliseconds timeout) {
  const std::string name = id_prefix_ + "boot";
  const auto deadline = Clock::now() + timeout;
  common::InterruptPoll interrupt(interrupt_check_);
  for (int iter = 0;; ++iter) {
    interrupt.poll();  // only here: every iteration that goes on owns nothing yet
    if (Clock::now() > deadline)
      throw TimeoutError(cat("rank ", rank_, ": could not join rendezvous segment ", name, " within ",
                             timeout.count(), " ms"));
    common::Segment seg = common::Segment::open(name);
    if (!seg.valid()) {
      seg = common::Segment::try_create(name, sizeof(BootLayout), 0, [&](void* p) {
        auto* l = static_cast<BootLayout*>(p);
        l->world_size = static_cast<uint32_t>(world_);
        l->layout_version = kLayoutVersion;
        l->nonce = random_nonce();
      });
      if (!seg.valid()) { backoff(iter); continue; }  // someone else created it: open theirs
      // A fresh rendezvous: nothing of this id is alive, so leftovers of a crashed run go now.
      int removed = common::remove_stale_segments(id_prefix_);
      if (removed > 0)
        common::log_line(LogLevel::Warn, LogLevel::Warn,
                         cat("removed ", removed, " stale SHM segment(s) of a crashed run with prefix ", id_prefix_));
    } else if (seg.payload_bytes() != sizeof(BootLayout)) {
      throw Error(cat("rendezvous segment ", name, " has ", seg.payload_bytes(), " bytes, expected ",
                      sizeof(BootLayout), " (another peerlink version?)"));
    }
    auto* l = static_cast<BootLayout*>(seg.payload());
    // A segment whose creator or a joined rank is dead belongs to a crashed run: replace it.
    bool stale = !seg.owner_alive();
    for (int r = 0; r < kMaxRanks && !stale; ++r) {
      const RankSlot& s = l->slots[r];
      if (s.state.load(std::memory_order_acquire) == kJoined && !common::process_alive({s.pid, s.start_time}))
        stale = true;
    }
    if (stale) {
      common::log_line(LogLevel::Warn, LogLevel::Warn,
                       cat("rank ", rank_, ": replacing stale rendezvous segment ", name, " of a crashed run"));
      common::Segment fresh = common::Segment::try_create(name, sizeof(BootLayout), 0, [&](void* p) {
        auto* nl = static_cast<BootLayout*>(p);
        nl->world_size = static_cast<uint32_t>(world_);
        nl->layout_version = kLayoutVersion;
        nl->nonce = random_nonce();
      });
      if (fresh.valid()) common::remove_stale_segments(id_prefix_);
      backoff(iter);
      continue;  // reopen whatever is named now
    }
    if (l->layout_version != kLayoutVersion)
      throw Error(cat("rendezvous segment ", name, " has layout version ", l->layout_version, ", expected ",
                      kLayoutVersion));
    if (static_cast<int>(l->world_size) != world_)
      throw InvalidArgument(cat("rank ", rank_, " was created with world_size ", world_,
                                " but the job's other ranks use world_size ", l->world_size));
    RankSlot& mine = l->slots[rank_];
    common::ProcId me = common::self_proc_id();
    if (mine.state.load(std::memory_order_acquire) != kEmpty)
      throw InvalidArgument(cat("rank ", rank_, " of this unique id is already taken by pid ", mine.pid,
                                " (two processes with the same rank?)"));
    mine.pid = me.pid;
    mine.start_time = me.start_time;
    mine.device = info.device;
    mine.completion_pref = static_cast<uint32_t>(info.completion_pref);
    mine.relay_mask = info.relay_mask;
    std::snprintf(mine.pci_bus_id, sizeof mine.pci_bus_id, "%s", info.pci_bus_id.c_str());
    uint32_t expected = kEmpty;
    if (!mine.state.compare_exchange_strong(expected, kJoined, std::memory_order_acq_rel))
      throw InvalidArgument(cat("rank ", rank_, " joined twice at once (two processes with the same rank?)"));
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
  common::InterruptPoll interrupt(interrupt_check_);
  for (int iter = 0;; ++iter) {
    std::vector<int> missing, gave_up;
    for (int r = 0; r < world_; ++r) {
      const RankSlot& s = layout_->slots[r];
      uint32_t st = s.state.load(std::memory_order_acquire);
      if (st == kEmpty) {
        missing.push_back(r);
      } else if (st == kLeft) {
        gave_up.push_back(r);
      } else if (r != rank_ && (iter % 256) == 255 && !common::process_alive({s.pid, s.start_time})) {
        throw PeerLostError(cat("rank ", r, " (pid ", s.pid, ") died during rendezvous"));
      }
    }
    if (missing.empty() && gave_up.empty()) return;
    interrupt.poll();  // the constructor's catch leaves and unlinks
    if (Clock::now() > deadline)
      throw TimeoutError(cat("rank ", rank_, ": rendezvous timed out after ", timeout.count(),
                             " ms; ranks that never arrived: ", missing.empty() ? "none" : missing_ranks(missing),
                             gave_up.empty() ? "" : "; ranks that arrived and gave up: " + missing_ranks(gave_up)));
    backoff(iter);
  }
}

bool Bootstrap::peer_left(int r) const {
  return layout_->slots[r].state.load(std::memory_order_acquire) == kLeft;
}

bool Bootstrap::peer_alive(int r) const {
  const RankSlot& s = layout_->slots[r];
  return s.state.load(std::memory_order_acquire) == kJoined && common::process_alive({s.pid, s.start_time});
}

void Bootstrap::check_interrupt() {
  if (!interrupt_check_) return;
  try {
    interrupt_check_();
  } catch (...) {
    interrupted_.store(true, std::memory_order_release);
    throw;
  }
}

void Bootstrap::barrier(std::chrono::milliseconds timeout) {
  uint64_t k = ++barrier_count_;
  layout_->slots[rank_].barrier_count.store(k, std::memory_order_release);
  for (int r = 0; r < world_; ++r) layout_->recv_bell[r].ring();
  const auto deadline = Clock::now() + timeout;
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
      interrupted_.store(true, std::memory_order_release);
      throw;
    }
    if ((iter & 63) == 63) {
      for (int r : missing)
        if (!peer_alive(r))
          throw PeerLostError(cat("barrier: rank ", r, peer_left(r) ? " closed its communicator" : " died"));
    }
    if (Clock::now() > deadline)
      throw TimeoutError(cat("barrier timed out after ", timeout.count(), " ms on rank ", rank_,
                             "; ranks that did not arrive: ", missing_ranks(missing)));
    if (iter > 64) {
      // Sleep on our own doorbell: peers ring everyone's when they arrive.
      uint32_t t = layout_->recv_bell[rank_].prepare();
      if (layout_->slots[missing[0]].barrier_count.load(std::memory_order_acquire) < k)
        layout_->recv_bell[rank_].wait(t, std::chrono::milliseconds(20));
    }
  }
}

void Bootstrap::allgather(const void* mine, size_t bytes, void* all, std::chrono::milliseconds timeout) {
  if (bytes > kAllgatherBytes)
    throw InvalidArgument(cat("allgather of ", bytes, " bytes exceeds the ", kAllgatherBytes, "-byte slot"));
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
  for (int r = 0; r < world_; ++r) {
    layout_->recv_bell[r].ring();
    layout_->send_bell[r].ring();
  }
}

}  // namespace peerlink::bootstrap
