// Setup and teardown of the registered allreduce buffers (see layout.h for what they hold).
#include "collectives/coll_state.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "collectives/coll_launch.h"
#include "collectives/device_launch.h"
#include "collectives/setup_record.h"
#include "common/format.h"
#include "common/log.h"
#include "common/proc.h"
#include "config/test_hooks.h"
#include "gpu/runtime.h"
#include "gpu/vmm.h"  // RelaxedCaptureMode
#include "peerlink/communicator.h"
#include "peerlink/errors.h"
#include "transport/services.h"

namespace peerlink::coll {
namespace {

static_assert(sizeof(SetupRecord) <= Communicator::kMaxAllgatherBytes, "allgather slot");
static_assert(kMaxBlocks == kMaxAllreduceBlocks, "Options::allreduce_blocks bound = flag area blocks");

// Default bytes per region position. GPU: two-shot steps of 32 MB (n * cap; fewer, longer steps
// measured 312 -> 332 GB/s busbw at 256 MB on 2x H200 vs 16 MB steps), 128 MB of scratch per rank.
// Host: 1 MB keeps SHM small and makes CI exercise multi-step calls.
size_t default_cap(bool host, int world) {
  if (host) return size_t(1) << 20;
  return std::max(size_t(4) << 20, (size_t(32) << 20) / size_t(world));
}

}  // namespace

// The host backend checks that the segment really holds alloc_bytes; for device IPC the mapped
// range is checked here, so that the offsets validated against alloc_bytes stay inside what was
// mapped.
char* open_peer_checked(detail::CommServices& svc, int p, const gpu::MemHandle& h, gpu::MemHandle* handle,
                        const char* what) {
  char* base = static_cast<char*>(svc.open_peer_memory(p, h));
  *handle = h;
  if (h.kind == gpu::HandleKind::DeviceIpc) {
    // The range query answers only in the context that owns the mapping: with two communicators of
    // one process on two GPUs (nccl-tests -g 2) the peer's allocation is this process's own memory
    // of the other device, and cuMemGetAddressRange from this device's context said NOT_FOUND
    // (seen on 2x H200). Ask in the context of the device that holds it.
    int holder = gpu::pointer_device(base);
    gpu::DeviceGuard on_holder(holder >= 0 ? holder : -1);
    gpu::AddressRange r = gpu::address_range(base);
    if (r.base != base || r.size < h.alloc_bytes)
      throw InvalidArgument(
          common::format("{}: rank {}'s allocation maps {} bytes at {}, its handle claims {} bytes at {}", what, p,
                         r.size, r.base, h.alloc_bytes, static_cast<void*>(base)));
  }
  return base;
}

CollState::CollState(detail::CommServices& svc)
    : svc_(&svc), rank_(svc.rank()), world_(svc.world_size()), host_(svc.backend().is_host()), device_(svc.device()) {}

CollState::~CollState() {
  // Teardown runs on the user's thread (close()): the device is switched only for it, and the
  // owners below release on their own device after this body.
  std::unique_ptr<gpu::DeviceGuard> dg;
  try {
    dg = std::make_unique<gpu::DeviceGuard>(host_ ? -1 : device_);
  } catch (...) {
  }
  try {
    // No kernel may still use the buffers we are about to free (bounded: a wedged peer).
    wait_last_launch();
  } catch (...) {
  }
  windows_.wins.clear();  // the peers' windows, unmapped on this device (PeerMapping)
  graph_windows_.wins.clear();  // a graph still holding one must not be replayed after close()
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    try {
      // A handle is set exactly when its mapping was acquired (open_peer_checked).
      if (flag_handle_[p].kind != gpu::HandleKind::None) svc_->release_peer_memory(p, flag_handle_[p]);
      if (data_handle_[p].kind != gpu::HandleKind::None) svc_->release_peer_memory(p, data_handle_[p]);
    } catch (...) {
    }
  }
  try {
    if (data_[rank_]) svc_->backend().free(data_[rank_]);
  } catch (...) {
  }
  try {
    if (host_ && flags_[rank_]) svc_->backend().free(flags_[rank_]);  // GPU: flags_mem_ frees it
  } catch (...) {
  }
}

bool CollState::wait_last_launch() const {
  if (host_ || !event_valid_) return true;
  // The event was recorded right after the last launch; its stream itself may be gone by now.
  const auto end = std::chrono::steady_clock::now() + svc_->options().timeout;
  while (!gpu::event_query(order_event_)) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

void CollState::set_broken_by_current_exception(const char* what) {
  constexpr const char* kUnusable = "; this communicator's collectives are unusable";
  try {
    throw;
  } catch (const TimeoutError& e) {
    broken_ = std::make_exception_ptr(TimeoutError(common::format("{}{}", e.what(), kUnusable)));
  } catch (const PeerLostError& e) {
    broken_ = std::make_exception_ptr(PeerLostError(common::format("{}{}", e.what(), kUnusable)));
  } catch (...) {  // e.g. Options::interrupt_check abandoned a wait: the ranks are out of step
    broken_ = std::make_exception_ptr(Error(common::format(
        "{} (rank {}): an earlier call on this communicator was abandoned mid-protocol; its collectives are unusable",
        what, rank_)));
  }
}

std::shared_ptr<CollState> coll_state_if_set(Communicator& comm) {
  return detail::services(comm).find<CollState>();
}

CollState& coll_state(Communicator& comm) {
  detail::CommServices& svc = detail::services(comm);
  svc.check_usable();
  // The setup waits for the other ranks (allgather) under the communicator's own setup lock only,
  // never a process-wide one: two communicators of one process set up from two threads (NCCL
  // programs driving one communicator per GPU, nccl-tests -g 2 through libnccl.so.2) would
  // deadlock, each rank's thread waiting for the other's, which waits for the lock.
  return svc.get_or_create<CollState>([&] { return CollState::create(svc); });
}

std::shared_ptr<CollState> CollState::create(detail::CommServices& svc) {
  if (svc.world_size() > kMaxRanks)
    throw UnsupportedError(common::format("allreduce supports at most {} ranks (one node); this communicator has {}",
                                          kMaxRanks, svc.world_size()));
  const Options& opts = svc.options();  // validated when the communicator was created
  std::shared_ptr<CollState> st(new CollState(svc));
  st->configure(opts);
  // The device is current for the setup only; the user's thread gets its own back (no-op on host).
  gpu::DeviceGuard dg(svc.device());
  // The first collective may be called inside a graph capture (a program need not warm up
  // eagerly): the allocations, zeroing and exchange below are no work of the captured stream, and in
  // relaxed mode they are legal (cudaThreadExchangeStreamCaptureMode, as NCCL does at its setup).
  gpu::RelaxedCaptureMode relaxed;
  st->allocate_local(opts);  // owned by `st` as soon as it exists, so a throw frees it
  const SetupRecord mine = st->local_record(opts);
  std::unique_ptr<SetupRecord[]> all(new SetupRecord[st->world_]);
  svc.allgather(&mine, sizeof mine, all.get());
  // Every record is untrusted: all are checked before any peer memory is mapped.
  SetupExpect expect;
  expect.world = st->world_;
  expect.host = st->host_;
  expect.cap = st->layout_.cap;
  expect.ll_cap = st->layout_.ll_cap;
  expect.ll128_cap = st->layout_.ll128_cap;
  expect.flag_bytes = sizeof(FlagArea);
  expect.data_bytes = st->layout_.total();
  for (int p = 0; p < st->world_; ++p) all[p] = parse_setup_record(&all[p], sizeof(SetupRecord), p, expect);
  st->agree(all.get(), opts);
  all[st->rank_] = mine;  // our own slot: the handles as exported (the allgather copy passed the same checks)
  st->map_peers(all.get());
  return st;
}

// Tuning and geometry from the Options (the same on every rank: setup checks the geometry).
void CollState::configure(const Options& opts) {
  size_t cap = opts.allreduce_scratch_bytes ? opts.allreduce_scratch_bytes : default_cap(host_, world_);
  threads_ = opts.allreduce_threads;  // 0: per algorithm
  blocks_override_ = opts.allreduce_blocks;
  layout_.world = world_;
  layout_.cap = round_up(cap, 64);
  if (!host_) {
    // LL lines double the bytes on the link: they win on latency up to 512 KB, flags win from 1 MB
    // (2x H200: 5.8 vs 7.3 us at 512 KB, 9.6 vs 9.0 us at 1 MB).
    ll_max_ = round_up(opts.allreduce_ll_max, 16);
    layout_.ll_cap = 2 * ll_max_;  // a 16-byte line carries 8 data bytes
    // LL128 lines: the area follows the option on every rank (the geometry must agree); they are
    // used only when every rank's every pair is NVLink or one GPU and the runtime is CUDA (NVLink's
    // whole 128-byte stores; HIP makes no such promise over xGMI), decided from all records (agree).
    layout_.ll128_cap = ll128_lines(opts.allreduce_ll128_max) * kLl128Line;
    // Programmatic dependent launch lets a kernel be scheduled while its predecessor on the stream
    // finishes (device_sync.h): 2x H200, graph replay, 2.31 -> 2.11 us at 8 B, 9.15 -> 8.79 us at 1 MB.
    int cc = gpu::compute_capability(device_);
    pdl_ = (opts.allreduce_pdl < 0 ? cc >= 90 : opts.allreduce_pdl != 0) && cc >= 90;
    generic_oneshot_ = detail::test_hooks(opts).allreduce_oneshot_generic;
  } else {
    // Host: a small LL area (SHM is zero-filled) so that CI runs the LL protocol of the other
    // collectives (host_collectives.cpp); host allreduce does not use it.
    ll_max_ = std::min(round_up(opts.allreduce_ll_max, 16), kHostLlMax);
    layout_.ll_cap = 2 * ll_max_;
    // And a small LL128 area, so that CI runs the LL128 line layout, tokens and slot reuse too
    // (host_collectives.cpp writes each line's flag last with a release store: no link involved).
    layout_.ll128_cap = ll128_lines(std::min(opts.allreduce_ll128_max, kHostLl128Max)) * kLl128Line;
  }
}

// This rank's flag area and scratch (zeroed before any peer can learn their handles), and on GPUs
// the error word, the order event and the copy-engine streams and events.
void CollState::allocate_local(const Options& opts) {
  gpu::Backend& be = svc_->backend();
  if (host_) {
    flags_[rank_] = static_cast<FlagArea*>(be.alloc(sizeof(FlagArea)));
    std::memset(flags_[rank_], 0, sizeof(FlagArea));
  } else {
    flags_mem_ = gpu::DeviceAlloc(device_, gpu::device_malloc_flags(sizeof(FlagArea)));
    flags_[rank_] = flags_mem_.as<FlagArea>();
    gpu::memset_sync(flags_[rank_], 0, sizeof(FlagArea));
    gpu::stream_sync(nullptr);  // zeroed before any peer can learn the handle
    error_mem_ = gpu::MappedHostAlloc::create(device_, 64);
    error_ = error_mem_.as<uint32_t>();
    event_mem_ = gpu::EventOwner::create(device_);
    order_event_ = event_mem_.get();
    sm_count_ = gpu::multiprocessor_count(device_);
    ce_lanes_ = opts.coll_ce_lanes;
    for (int l = 0; l < ce_lanes_; ++l) ce_streams_[l] = gpu::StreamOwner::create(device_);
    for (auto& e : ce_events_) e = gpu::EventOwner::create(device_);
    preload_multi_kernel_paths();  // no lazy load inside a call that already waits (gpu::dev::preload)
  }
  data_[rank_] = static_cast<char*>(be.alloc(layout_.total()));
  if (!host_) {  // LL lines must start invalid (zero flags); zero everything once
    gpu::memset_sync(data_[rank_], 0, layout_.total());
    gpu::stream_sync(nullptr);
  }
}

// What this rank publishes: its exported areas, its geometry and what the grid agreement needs.
SetupRecord CollState::local_record(const Options& opts) {
  SetupRecord mine;
  size_t off = 0;
  mine.flags = svc_->export_memory(flags_[rank_], sizeof(FlagArea), &off);
  mine.flags_off = off;
  mine.data = svc_->export_memory(data_[rank_], layout_.total(), &off);
  mine.data_off = off;
  mine.rank = rank_;
  mine.cap = layout_.cap;
  mine.ll_cap = layout_.ll_cap;
  mine.ll128_cap = layout_.ll128_cap;
  nvlink_all_ = !host_ && nvlink_to_all(*svc_, world_);  // allreduce's choice, any runtime
  const bool links = host_ || (std::string(gpu::runtime_name()) == "cuda" && nvlink_all_);
  mine.ll128_links = links ? 1 : 0;
  mine.world = world_;
  mine.host = host_ ? 1 : 0;
  mine.sm_count = host_ ? 0 : std::max(1, sm_count_);
  mine.grid_max = opts.max_blocks > 0 ? opts.max_blocks : kMaxBlocks;
  const common::ProcId me = common::self_proc_id();
  mine.process = uint64_t(uint32_t(me.pid)) * 0x9E3779B97F4A7C15ull ^ me.start_time;
  mine.device = host_ ? -1 : device_;
  return mine;
}

// What every rank computes alike from the same (checked) records and options: the grid, PDL where
// ranks share a GPU, and whether LL128 lines are on.
void CollState::agree(const SetupRecord* all, const Options& opts) {
  const GridAgreement grid = grid_agreement(all, world_);
  sm_count_ = grid.sm_count;
  grid_cap_ = grid.cap;
  // Ranks that share a GPU as threads spin for each other's blocks, which must all be resident. Under
  // programmatic dependent launch a kernel's successor is scheduled early and holds multiprocessors
  // too: two ranks on one H200 with 66 bandwidth blocks of 1024 threads each (one per SM) ran into
  // the device timeout replaying a graph of 16 MB allreduces (eager and the 512-thread grids
  // passed). Such communicators launch without PDL.
  if (grid.shared) pdl_ = false;
  bool ll128 = layout_.ll128_cap > 0;
  for (int p = 0; p < world_; ++p) ll128 = ll128 && all[p].ll128_links == 1;
  ll128_max_ = !ll128 ? 0 : host_ ? std::min(opts.allreduce_ll128_max, kHostLl128Max) : opts.allreduce_ll128_max;
  if (host_ || layout_.ll128_cap == 0 || opts.log_level < LogLevel::Info) return;
  std::string why;
  for (int p = 0; p < world_; ++p)
    if (all[p].ll128_links != 1) why = common::format("{}{}rank {}", why, why.empty() ? "" : ", ", p);
  common::log_line(
      LogLevel::Info, opts.log_level,
      ll128 ? common::format(
                  "allreduce (rank {}): LL128 lines on, for one-shot messages and collective pieces up to {} bytes",
                  rank_, ll128_max_)
            : common::format("allreduce (rank {}): no LL128 lines ({} has a pair that is neither NVLink nor one GPU, "
                             "or a runtime other than CUDA)",
                             rank_, why));
}

// Maps every peer's areas; our own handles are kept as exported.
void CollState::map_peers(const SetupRecord* all) {
  for (int p = 0; p < world_; ++p) {
    const SetupRecord& q = all[p];
    if (p == rank_) {
      flag_handle_[p] = q.flags;
      data_handle_[p] = q.data;
      continue;
    }
    flags_[p] = reinterpret_cast<FlagArea*>(open_peer_checked(*svc_, p, q.flags, &flag_handle_[p], "allreduce setup") +
                                            q.flags_off);
    data_[p] = open_peer_checked(*svc_, p, q.data, &data_handle_[p], "allreduce setup") + q.data_off;
  }
}

void fill_state_args(const CollState& st, LaunchArgs& a) {
  a.rank = st.rank();
  a.world = st.world();
  a.layout = st.layout();
  for (int r = 0; r < st.world(); ++r) {
    a.data[r] = st.data(r);
    a.flags[r] = st.flags(r);
  }
  a.error = st.error_word();
  a.timeout_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(st.svc().options().timeout).count());
}

bool nvlink_to_all(const detail::CommServices& svc, int world) {
  for (int p = 0; p < world; ++p)
    if (p != svc.rank() && !svc.nvlink_to(p)) return false;
  return true;
}

}  // namespace peerlink::coll
