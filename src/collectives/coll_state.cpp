// Setup and teardown of the registered allreduce buffers (see layout.h for what they hold).
#include "collectives/coll_state.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "common/log.h"
#include "peerlink/communicator.h"
#include "peerlink/errors.h"
#include "transport/comm_impl.h"

namespace peerlink::coll {
namespace {

using common::cat;

long long env_int(const char* name, long long def, long long lo, long long hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (!end || *end || x < lo || x > hi)
    throw InvalidArgument(cat(name, "='", v, "' is not an integer in [", lo, ", ", hi, "]"));
  return x;
}

// What every rank publishes once: its two allocations and the geometry it assumes.
struct Published {
  gpu::MemHandle flags, data;
  uint64_t flags_off = 0, data_off = 0;
  uint64_t cap = 0;
  uint64_t ll_cap = 0;
  int32_t world = 0;
  int32_t host = 0;
};
static_assert(sizeof(Published) <= detail::CommImpl::kMaxAllgatherBytes, "allgather slot");

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

CollState::~CollState() {
  if (!impl) return;
  try {
    if (!host && event_valid) {
      // No kernel may still use the buffers we are about to free (bounded: a wedged peer). The
      // event was recorded right after our last launch; the stream itself may be gone by now.
      auto end = std::chrono::steady_clock::now() + impl->options().timeout;
      while (!gpu::event_query(order_event) && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  } catch (...) {
  }
  for (int p = 0; p < world; ++p) {
    if (p == rank) continue;
    try {
      if (flags[p]) impl->release_peer_memory(p, flag_handle[p]);
      if (data[p]) impl->release_peer_memory(p, data_handle[p]);
    } catch (...) {
    }
  }
  try {
    if (data[rank]) impl->backend().free(data[rank]);
    if (flags[rank]) {
      if (host) impl->backend().free(flags[rank]);
      else gpu::device_free(flags[rank]);
    }
  } catch (...) {
  }
  if (order_event) gpu::event_destroy(order_event);
  if (error) gpu::host_free_mapped(error);
}

CollState& coll_state(Communicator& comm) {
  detail::CommImpl& impl = comm.impl();
  impl.check_usable();
  std::lock_guard<std::mutex> g(setup_mutex());
  std::shared_ptr<void>& slot = impl.upper_state("collectives");
  if (slot) return *static_cast<CollState*>(slot.get());

  if (impl.world_size() > kMaxRanks)
    throw UnsupportedError(cat("allreduce supports at most ", kMaxRanks, " ranks (one node); this communicator has ",
                               impl.world_size()));
  auto st = std::make_shared<CollState>();
  st->rank = impl.rank();
  st->world = impl.world_size();
  st->host = impl.backend().is_host();
  size_t cap = static_cast<size_t>(env_int("PEERLINK_ALLREDUCE_SCRATCH_BYTES", static_cast<long long>(default_cap(st->host, impl.world_size())),
                                           64, 1LL << 32));
  cap = round_up(cap, 64);
  st->threads = static_cast<int>(env_int("PEERLINK_ALLREDUCE_THREADS", 0, 0, 1024));  // 0: per algorithm
  st->blocks_override = static_cast<int>(env_int("PEERLINK_ALLREDUCE_BLOCKS", 0, 0, kMaxBlocks));
  st->layout.world = st->world;
  st->layout.cap = cap;
  if (!st->host) {
    // LL lines double the bytes on the link: they win on latency up to 512 KB, flags win from 1 MB
    // (2x H200: 5.8 vs 7.3 us at 512 KB, 9.6 vs 9.0 us at 1 MB).
    st->ll_max = round_up(static_cast<size_t>(env_int("PEERLINK_ALLREDUCE_LL_MAX", 512 << 10, 0, 1LL << 28)), 16);
    st->layout.ll_cap = 2 * st->ll_max;  // a 16-byte line carries 8 data bytes
    // Programmatic dependent launch lets a kernel be scheduled while its predecessor on the stream
    // finishes (device_sync.h): 2x H200, graph replay, 2.31 -> 2.11 us at 8 B, 9.15 -> 8.79 us at 1 MB.
    int cc = gpu::compute_capability(impl.device());
    st->pdl = env_int("PEERLINK_ALLREDUCE_PDL", cc >= 90 ? 1 : 0, 0, 1) != 0 && cc >= 90;
    st->generic_oneshot = env_int("PEERLINK_ALLREDUCE_ONESHOT_GENERIC", 0, 0, 1) != 0;
  }

  Published mine;
  {
    // Everything allocated here is owned by `st` as soon as it exists, so a throw frees it.
    st->impl = &impl;
    gpu::Backend& be = impl.backend();
    if (st->host) {
      st->flags[st->rank] = static_cast<FlagArea*>(be.alloc(sizeof(FlagArea)));
      std::memset(st->flags[st->rank], 0, sizeof(FlagArea));
    } else {
      gpu::set_device(impl.device());
      st->flags[st->rank] = static_cast<FlagArea*>(gpu::device_malloc_flags(sizeof(FlagArea)));
      gpu::memset_sync(st->flags[st->rank], 0, sizeof(FlagArea));
      gpu::stream_sync(nullptr);  // zeroed before any peer can learn the handle
      st->error = static_cast<uint32_t*>(gpu::host_alloc_mapped(64));
      st->order_event = gpu::event_create();
      st->sm_count = gpu::multiprocessor_count(impl.device());
    }
    st->data[st->rank] = static_cast<char*>(be.alloc(st->layout.total()));
    if (!st->host) {  // LL lines must start invalid (zero flags); zero everything once
      gpu::memset_sync(st->data[st->rank], 0, st->layout.total());
      gpu::stream_sync(nullptr);
    }
    size_t off = 0;
    mine.flags = impl.export_memory(st->flags[st->rank], sizeof(FlagArea), &off);
    mine.flags_off = off;
    mine.data = impl.export_memory(st->data[st->rank], st->layout.total(), &off);
    mine.data_off = off;
    mine.cap = cap;
    mine.ll_cap = st->layout.ll_cap;
    mine.world = st->world;
    mine.host = st->host ? 1 : 0;
  }
  std::unique_ptr<Published[]> all(new Published[st->world]);
  impl.allgather(&mine, sizeof mine, all.get());
  for (int p = 0; p < st->world; ++p) {
    const Published& q = all[p];
    if (q.cap != cap || q.ll_cap != mine.ll_cap || q.world != st->world || q.host != mine.host)
      throw InvalidArgument(cat("allreduce setup: rank ", p, " uses scratch ", q.cap, " bytes/", q.world, " ranks/",
                                q.host ? "host" : "gpu", ", rank ", st->rank, " uses ", cap, "/", st->world, "/",
                                mine.host ? "host" : "gpu", " (set PEERLINK_ALLREDUCE_SCRATCH_BYTES and PEERLINK_ALLREDUCE_LL_MAX alike)"));
    st->flag_handle[p] = q.flags;
    st->data_handle[p] = q.data;
    if (p == st->rank) continue;
    st->flags[p] = reinterpret_cast<FlagArea*>(static_cast<char*>(impl.open_peer_memory(p, q.flags)) + q.flags_off);
    st->data[p] = static_cast<char*>(impl.open_peer_memory(p, q.data)) + q.data_off;
  }
  slot = st;
  return *st;
}

}  // namespace peerlink::coll
