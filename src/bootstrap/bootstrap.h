// Rendezvous of the ranks of one job on one node through a POSIX SHM segment named after the
// unique id: any start order, bounded waits that name the ranks that never arrived, detection and
// replacement of a segment left by a crashed run. The mapping carries barriers, small allgathers
// and liveness for the communicator's whole life; the name's lifetime is below.
//
// Ownership and staleness are decided atomically with a shared flock on the segment's file: the
// creator takes it before the name appears, every joiner takes it before claiming its slot, and
// the kernel drops it when a process dies. A segment nobody holds belongs to no live rank and is
// replaced; one that is held is joined, whoever created it and whether or not its creator is
// still there. A rank slot is claimed with a compare-and-swap; a second live claimant of a rank
// gets InvalidArgument, so a job never splits across two segments. The name stays while the job
// lives (a duplicate arriving late still meets it) and goes when its first rank leaves.
//
// A rendezvous that fails for good (a rank died before every rank joined) records why in the
// segment and, while some rank has not arrived yet, leaves it behind unowned: a rank of that run
// arriving later fails at once with PeerLostError naming the dead rank, instead of waiting out its
// timeout in a fresh rendezvous. A process started after the failure is a rerun of the id, not a
// late rank of the failed run: for it the segment is stale and replaced, as after a crash.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/futex.h"
#include "common/interrupt.h"
#include "common/proc.h"
#include "common/shm_segment.h"
#include "shm/spsc_ring.h"

namespace peerlink::bootstrap {

constexpr int kMaxRanks = 64;
constexpr size_t kAllgatherBytes = 1024;
// BootLayout's version, checked by every joiner. 2: flock ownership, kJoining; 3: liveness-only
// slots, no transport fields (doorbells, pair decisions, join data live in the transport's segment);
// 4: FailureRecord in the header line.
constexpr uint32_t kLayoutVersion = 4;

// kJoining: claimed by CAS, pid/start time being written; kJoined once they are.
enum SlotState : uint32_t { kEmpty = 0, kJoined = 1, kLeft = 2, kJoining = 3 };

struct alignas(64) RankSlot {
  std::atomic<uint32_t> state;
  int32_t pid;
  uint64_t start_time;
  std::atomic<uint64_t> barrier_count;
};
static_assert(sizeof(RankSlot) == 64, "one cache line per rank slot");

// Why a rendezvous failed, written once by the first rank that saw it (state kFailureRecording while
// the fields are written, then kFailureRecorded). when_ticks: clock ticks since boot, the unit of a
// process's start time (common::ProcId), so a late rank can tell whether it belongs to that run.
enum FailureState : uint32_t { kNoFailure = 0, kFailureRecording = 1, kFailureRecorded = 2 };
struct FailureRecord {
  std::atomic<uint32_t> state;
  int32_t dead_rank;
  int32_t dead_pid;
  int32_t seen_by;
  uint64_t when_ticks;
};
static_assert(sizeof(FailureRecord) == 24, "the failure record fits the header line");

struct BootLayout {
  uint32_t world_size;
  uint32_t layout_version;
  uint64_t nonce;
  FailureRecord failure;
  char pad[24];
  RankSlot slots[kMaxRanks];
  common::Doorbell barrier_bell[kMaxRanks];  // rung on barrier arrival and leave
  // Layers above exchange their own per-rank data (the transport's join record, the collectives'
  // setup record) through allgather and own their control segments: nothing of theirs lives here.
  char allgather[kMaxRanks][kAllgatherBytes];
};

class Bootstrap {
 public:
  // Joins (creating if first) the rendezvous of `unique_id` and waits for all ranks. Every wait
  // runs `interrupt_check` (Options::interrupt_check; may be empty) through common::InterruptPoll.
  Bootstrap(const std::string& unique_id, int rank, int world_size, std::chrono::milliseconds timeout, std::function<void()> interrupt_check = nullptr);
  ~Bootstrap();
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  uint64_t nonce() const { return layout_->nonce; }
  // Prefix of every SHM name of this job: "pl_<id>_<hash>_<nonce>_".
  const std::string& job_prefix() const { return job_prefix_; }
  const std::string& id_prefix() const { return id_prefix_; }
  BootLayout& layout() { return *layout_; }
  const RankSlot& slot(int r) const { return layout_->slots[r]; }

  // All ranks; throws TimeoutError naming the ranks that did not arrive, PeerLostError if one died,
  // or what the interruption hook throws (then interrupted() is true; callers check it first).
  void barrier(std::chrono::milliseconds timeout);
  void allgather(const void* mine, size_t bytes, void* all, std::chrono::milliseconds timeout);
  // Unlinks the rendezvous name (new jobs with the same id start clean). Only while the name still
  // refers to this job's segment.
  void unlink_name() { seg_.unlink(); }
  // Alive and not left.
  bool peer_alive(int r) const;
  bool peer_left(int r) const;
  // Marks this rank as gone (clean close) and rings every doorbell so peers notice promptly.
  void leave();
  // Runs the interruption hook for a collective wait of a layer above (it rate-limits itself).
  // A throw, like one inside barrier(), marks the collectives out of step: this rank has counted
  // a barrier or step that its peers may not have, so the next one would pair with the wrong one.
  void check_interrupt();
  // True after an interrupted barrier or collective wait: this rank must not take part in more.
  bool interrupted() const { return interrupted_.load(std::memory_order_acquire); }
  // Why interrupted() is true: "interrupted", "timed out" or "lost a peer" (empty while usable).
  std::string out_of_step_reason() const;

  // How often a barrier wait checks that the ranks it waits for are alive (detection latency).
  static constexpr std::chrono::milliseconds kLivenessInterval{50};

 private:
  void join(std::chrono::milliseconds timeout);
  common::Segment acquire_rendezvous(const std::string& name);
  // An unowned rendezvous segment (held here exclusively): throws PeerLostError when it records a
  // failure of the run this process belongs to; returns when it is merely stale.
  void check_failed_run(common::Segment& seg);
  bool claim_slot(BootLayout* l, std::chrono::steady_clock::time_point deadline, common::InterruptPoll& interrupt,
                  std::string* why_wait);
  // Records (once) that rank r died before every rank joined, then throws PeerLostError.
  [[noreturn]] void rendezvous_peer_lost(int r);
  // True when the rendezvous failed and a rank has not arrived yet (the segment must stay for it).
  bool awaits_late_ranks() const;
  void mark_out_of_step(int reason);
  [[noreturn]] void barrier_peer_lost(int r);
  void wait_all_joined(std::chrono::milliseconds timeout);
  std::string missing_ranks(const std::vector<int>& missing) const;

  int rank_;
  int world_;
  std::string id_prefix_;
  std::string job_prefix_;
  common::Segment seg_;
  BootLayout* layout_ = nullptr;
  uint64_t barrier_count_ = 0;
  uint64_t allgather_count_ = 0;
  bool left_ = false;
  std::function<void()> interrupt_check_;
  std::atomic<bool> interrupted_{false};
  std::atomic<int> out_of_step_{0};  // 0 usable, 1 interrupted, 2 timed out, 3 lost a peer
};

}  // namespace peerlink::bootstrap
