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
#include "gpu/runtime.h"
#include "gpu/vmm.h"  // RelaxedCaptureMode
#include "common/log.h"
#include "common/proc.h"
#include "config/test_hooks.h"
#include "peerlink/communicator.h"
#include "peerlink/errors.h"
#include "transport/services.h"

namespace peerlink::coll {
namespace {

using common::cat;

static_assert(sizeof(SetupRecord) <= Communicator::kMaxAllgatherBytes, "allgather slot");
static_assert(kMaxBlocks == kMaxAllreduceBlocks, "Options::allreduce_blocks bound = flag area blocks");

// Default bytes per region position. GPU: two-shot steps of 32 MB (n * cap; fewer, longer steps
// measured 312 -> 332 GB/s busbw at 256 MB on 2x H200 vs 16 MB steps), 128 MB of scratch per rank.
// Host: 1 MB keeps SHM small and makes CI exercise multi-step calls.
size_t default_cap(bool host, int world) {
  if (host) return size_t(1) << 20;
  return std::max(size_t(4) << 20, (size_t(32) << 20) / size_t(world));
}

std::mutex& setup_mutex() {
  static std::mutex m;  // guards only the check-and-create of the per-communicator slot
  return m;
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
      throw InvalidArgument(cat(what, ": rank ", p, "'s allocation maps ", r.size, " bytes at ", r.base,
                                ", its handle claims ", h.alloc_bytes, " bytes at ", static_cast<void*>(base)));
  }
  return base;
}

CollState::~CollState() {
  if (!svc) return;
  // Teardown runs on the user's thread (close()): the device is switched only for it, and the
  // owners below release on their own device after this body.
  std::unique_ptr<gpu::DeviceGuard> dg;
  try {
    dg = std::make_unique<gpu::DeviceGuard>(host ? -1 : device);
  } catch (...) {
  }
  try {
    // No kernel may still use the buffers we are about to free (bounded: a wedged peer).
    wait_last_launch(*this);
  } catch (...) {
  }
  windows.wins.clear();  // the peers' windows, unmapped on this device (PeerMapping)
  graph_windows.wins.clear();  // a graph still holding one must not be replayed after close()
  for (int p = 0; p < world; ++p) {
    if (p == rank) continue;
    try {
      // A handle is set exactly when its mapping was acquired (open_peer_checked).
      if (flag_handle[p].kind != gpu::HandleKind::None) svc->release_peer_memory(p, flag_handle[p]);
      if (data_handle[p].kind != gpu::HandleKind::None) svc->release_peer_memory(p, data_handle[p]);
    } catch (...) {
    }
  }
  try {
    if (data[rank]) svc->backend().free(data[rank]);
  } catch (...) {
  }
  try {
    if (host && flags[rank]) svc->backend().free(flags[rank]);  // GPU: flags_mem frees it
  } catch (...) {
  }
}

bool wait_last_launch(const CollState& st) {
  if (st.host || !st.event_valid) return true;
  // The event was recorded right after the last launch; its stream itself may be gone by now.
  const auto end = std::chrono::steady_clock::now() + st.svc->options().timeout;
  while (!gpu::event_query(st.order_event)) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

CollState* coll_state_if_set(Communicator& comm) {
  detail::CommServices& svc = detail::services(comm);
  std::lock_guard<std::mutex> g(setup_mutex());
  std::shared_ptr<void>& slot = svc.upper_state("collectives");
  return static_cast<CollState*>(slot.get());
}

CollState& coll_state(Communicator& comm) {
  detail::CommServices& svc = detail::services(comm);
  svc.check_usable();
  // The setup below waits for the other ranks (allgather): it must not hold a process-wide lock,
  // or two communicators of one process set up from two threads (NCCL programs driving one
  // communicator per GPU, nccl-tests -g 2 through libnccl.so.2) deadlock, each rank's thread
  // waiting for the other's, which waits for the lock. The global mutex only finds or creates this
  // communicator's own setup mutex; that one serialises the setup of this communicator alone.
  std::shared_ptr<std::mutex> comm_setup;
  {
    std::lock_guard<std::mutex> g(setup_mutex());
    std::shared_ptr<void>& slot = svc.upper_state("collectives");
    if (slot) return *static_cast<CollState*>(slot.get());
    std::shared_ptr<void>& m = svc.upper_state("collectives_setup");
    if (!m) m = std::make_shared<std::mutex>();
    comm_setup = std::static_pointer_cast<std::mutex>(m);
  }
  std::lock_guard<std::mutex> cg(*comm_setup);
  std::shared_ptr<void>& slot = svc.upper_state("collectives");  // a stable map entry (CommImpl)
  {
    std::lock_guard<std::mutex> g(setup_mutex());
    if (slot) return *static_cast<CollState*>(slot.get());
  }

  if (svc.world_size() > kMaxRanks)
    throw UnsupportedError(cat("allreduce supports at most ", kMaxRanks, " ranks (one node); this communicator has ",
                               svc.world_size()));
  const Options& opts = svc.options();  // validated when the communicator was created
  auto st = std::make_shared<CollState>();
  st->rank = svc.rank();
  st->world = svc.world_size();
  st->host = svc.backend().is_host();
  size_t cap = opts.allreduce_scratch_bytes ? opts.allreduce_scratch_bytes : default_cap(st->host, svc.world_size());
  cap = round_up(cap, 64);
  st->threads = opts.allreduce_threads;  // 0: per algorithm
  st->blocks_override = opts.allreduce_blocks;
  st->layout.world = st->world;
  st->layout.cap = cap;
  if (!st->host) {
    // LL lines double the bytes on the link: they win on latency up to 512 KB, flags win from 1 MB
    // (2x H200: 5.8 vs 7.3 us at 512 KB, 9.6 vs 9.0 us at 1 MB).
    st->ll_max = round_up(opts.allreduce_ll_max, 16);
    st->layout.ll_cap = 2 * st->ll_max;  // a 16-byte line carries 8 data bytes
    // LL128 lines: the area follows the option on every rank (the geometry must agree); they are
    // used only when every rank's every pair is NVLink or one GPU and the runtime is CUDA (NVLink's
    // whole 128-byte stores; HIP makes no such promise over xGMI), decided from all records below.
    st->layout.ll128_cap = ll128_lines(opts.allreduce_ll128_max) * kLl128Line;
    // Programmatic dependent launch lets a kernel be scheduled while its predecessor on the stream
    // finishes (device_sync.h): 2x H200, graph replay, 2.31 -> 2.11 us at 8 B, 9.15 -> 8.79 us at 1 MB.
    int cc = gpu::compute_capability(svc.device());
    st->pdl = (opts.allreduce_pdl < 0 ? cc >= 90 : opts.allreduce_pdl != 0) && cc >= 90;
    st->generic_oneshot = detail::test_hooks(opts).allreduce_oneshot_generic;
  } else {
    // Host: a small LL area (SHM is zero-filled) so that CI runs the LL protocol of the other
    // collectives (host_collectives.cpp); host allreduce does not use it.
    st->ll_max = std::min(round_up(opts.allreduce_ll_max, 16), kHostLlMax);
    st->layout.ll_cap = 2 * st->ll_max;
    // And a small LL128 area, so that CI runs the LL128 line layout, tokens and slot reuse too
    // (host_collectives.cpp writes each line's flag last with a release store: no link involved).
    st->layout.ll128_cap = ll128_lines(std::min(opts.allreduce_ll128_max, kHostLl128Max)) * kLl128Line;
  }

  // The device is current for the setup only; the user's thread gets its own back (no-op on host).
  gpu::DeviceGuard dg(svc.device());
  // The first collective may be called inside a graph capture (a program need not warm up
  // eagerly): the allocations, zeroing and exchange below are no work of the captured stream, and in
  // relaxed mode they are legal (cudaThreadExchangeStreamCaptureMode, as NCCL does at its setup).
  gpu::RelaxedCaptureMode relaxed;
  SetupRecord mine;
  {
    // Everything allocated here is owned by `st` as soon as it exists, so a throw frees it.
    st->svc = &svc;
    st->device = svc.device();
    gpu::Backend& be = svc.backend();
    if (st->host) {
      st->flags[st->rank] = static_cast<FlagArea*>(be.alloc(sizeof(FlagArea)));
      std::memset(st->flags[st->rank], 0, sizeof(FlagArea));
    } else {
      st->flags_mem = gpu::DeviceAlloc(st->device, gpu::device_malloc_flags(sizeof(FlagArea)));
      st->flags[st->rank] = st->flags_mem.as<FlagArea>();
      gpu::memset_sync(st->flags[st->rank], 0, sizeof(FlagArea));
      gpu::stream_sync(nullptr);  // zeroed before any peer can learn the handle
      st->error_mem = gpu::MappedHostAlloc::create(st->device, 64);
      st->error = st->error_mem.as<uint32_t>();
      st->event_mem = gpu::EventOwner::create(st->device);
      st->order_event = st->event_mem.get();
      st->sm_count = gpu::multiprocessor_count(svc.device());
      st->ce_lanes = opts.coll_ce_lanes;
      for (int l = 0; l < st->ce_lanes; ++l) st->ce_streams[l] = gpu::StreamOwner::create(st->device);
      for (auto& e : st->ce_events) e = gpu::EventOwner::create(st->device);
      preload_multi_kernel_paths();  // no lazy load inside a call that already waits (gpu::dev::preload)
    }
    st->data[st->rank] = static_cast<char*>(be.alloc(st->layout.total()));
    if (!st->host) {  // LL lines must start invalid (zero flags); zero everything once
      gpu::memset_sync(st->data[st->rank], 0, st->layout.total());
      gpu::stream_sync(nullptr);
    }
    size_t off = 0;
    mine.flags = svc.export_memory(st->flags[st->rank], sizeof(FlagArea), &off);
    mine.flags_off = off;
    mine.data = svc.export_memory(st->data[st->rank], st->layout.total(), &off);
    mine.data_off = off;
    mine.rank = st->rank;
    mine.cap = cap;
    mine.ll_cap = st->layout.ll_cap;
    mine.ll128_cap = st->layout.ll128_cap;
    st->nvlink_all = !st->host && nvlink_to_all(svc, st->world);  // allreduce's choice, any runtime
    const bool links = st->host || (std::string(gpu::runtime_name()) == "cuda" && st->nvlink_all);
    mine.ll128_links = links ? 1 : 0;
    mine.world = st->world;
    mine.host = st->host ? 1 : 0;
    mine.sm_count = st->host ? 0 : std::max(1, st->sm_count);
    mine.grid_max = opts.max_blocks > 0 ? opts.max_blocks : kMaxBlocks;
    const common::ProcId me = common::self_proc_id();
    mine.process = uint64_t(uint32_t(me.pid)) * 0x9E3779B97F4A7C15ull ^ me.start_time;
    mine.device = st->host ? -1 : st->device;
  }
  std::unique_ptr<SetupRecord[]> all(new SetupRecord[st->world]);
  svc.allgather(&mine, sizeof mine, all.get());
  // Every record is untrusted (defect #6): all are checked before any peer memory is mapped.
  SetupExpect expect;
  expect.world = st->world;
  expect.host = st->host;
  expect.cap = cap;
  expect.ll_cap = st->layout.ll_cap;
  expect.ll128_cap = st->layout.ll128_cap;
  expect.flag_bytes = sizeof(FlagArea);
  expect.data_bytes = st->layout.total();
  for (int p = 0; p < st->world; ++p) all[p] = parse_setup_record(&all[p], sizeof(SetupRecord), p, expect);
  const GridAgreement grid = grid_agreement(all.get(), st->world);
  st->sm_count = grid.sm_count;
  st->grid_cap = grid.cap;
  // Ranks that share a GPU as threads spin for each other's blocks, which must all be resident. Under
  // programmatic dependent launch a kernel's successor is scheduled early and holds multiprocessors
  // too: two ranks on one H200 with 66 bandwidth blocks of 1024 threads each (one per SM) ran into
  // the device timeout replaying a graph of 16 MB allreduces (session 27 call 3; eager and the
  // 512-thread grids passed). Such communicators launch without PDL.
  if (grid.shared) st->pdl = false;
  bool ll128 = st->layout.ll128_cap > 0;
  for (int p = 0; p < st->world; ++p) ll128 = ll128 && all[p].ll128_links == 1;
  // Every rank computes the same from the same records and options.
  st->ll128_max = !ll128 ? 0 : st->host ? std::min(opts.allreduce_ll128_max, kHostLl128Max) : opts.allreduce_ll128_max;
  if (!st->host && st->layout.ll128_cap > 0 && opts.log_level >= LogLevel::Info) {
    std::string why;
    for (int p = 0; p < st->world; ++p)
      if (all[p].ll128_links != 1) why = cat(why, why.empty() ? "" : ", ", "rank ", p);
    common::log_line(LogLevel::Info, opts.log_level,
                     ll128 ? cat("allreduce (rank ", st->rank, "): LL128 lines on, for one-shot messages and "
                                 "collective pieces up to ", st->ll128_max, " bytes")
                           : cat("allreduce (rank ", st->rank, "): no LL128 lines (", why,
                                 " has a pair that is neither NVLink nor one GPU, or a runtime other than CUDA)"));
  }
  for (int p = 0; p < st->world; ++p) {
    const SetupRecord& q = all[p];
    if (p == st->rank) {
      st->flag_handle[p] = mine.flags;
      st->data_handle[p] = mine.data;
      continue;
    }
    st->flags[p] = reinterpret_cast<FlagArea*>(open_peer_checked(svc, p, q.flags, &st->flag_handle[p], "allreduce setup") + q.flags_off);
    st->data[p] = open_peer_checked(svc, p, q.data, &st->data_handle[p], "allreduce setup") + q.data_off;
  }
  {
    std::lock_guard<std::mutex> g(setup_mutex());  // readers above test the slot under this lock
    slot = st;
  }
  return *st;
}

void fill_state_args(const CollState& st, LaunchArgs& a) {
  a.rank = st.rank;
  a.world = st.world;
  a.layout = st.layout;
  for (int r = 0; r < st.world; ++r) {
    a.data[r] = st.data[r];
    a.flags[r] = st.flags[r];
  }
  a.error = st.error;
  a.timeout_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(st.svc->options().timeout).count());
}

bool nvlink_to_all(const detail::CommServices& svc, int world) {
  for (int p = 0; p < world; ++p)
    if (p != svc.rank() && !svc.nvlink_to(p)) return false;
  return true;
}

}  // namespace peerlink::coll
