// NCCL-form zero-copy between processes, host side: exports of receive allocations (receiver),
// non-blocking binds of the peer's exports (sender). Protocol and why: stream_zc.h.
#include "stream/stream_zc.h"

#include <algorithm>

#include "common/format.h"
#include "common/log.h"
#include "gpu/runtime.h"
#include "peerlink/errors.h"
#include "transport/services.h"

namespace peerlink::detail {

using namespace peerlink::stream;

StreamZeroCopy::StreamZeroCopy(CommServices& comm, int world)
    : comm_(comm),
      exports_(size_t(world)),
      refused_(size_t(world)),
      bound_(size_t(world), 0) {
  const size_t n = size_t(world) * kZcSlots;
  table_ = gpu::DeviceAlloc::create(comm.device(), n * sizeof(ZcEntry));
  gpu::DeviceGuard g(comm.device());
  gpu::memset_sync(table_.get(), 0, n * sizeof(ZcEntry));
  seen_ = gpu::MappedHostAlloc::create(comm.device(), n);  // zeroed
}

int StreamZeroCopy::offer(int peer, const void* dst, size_t len, bool may_export, uint64_t* offset) {
  // Only memory of this rank's device: the peer's GPU reaches it through the link this pair uses.
  if (gpu::pointer_device(dst) != comm_.device()) return -1;
  gpu::AllocRange r;
  try {
    r = comm_.backend().find_allocation(dst, len);
  } catch (const Error&) {
    return -1;  // not exportable memory (the staged path takes any device memory)
  }
  const Export me{r.base, r.bytes, r.alloc_id};
  std::vector<Export>& ex = exports_[size_t(peer)];
  *offset = uint64_t(static_cast<const char*>(dst) - r.base);
  auto it = std::find(ex.begin(), ex.end(), me);
  if (it != ex.end()) return int(it - ex.begin());
  std::vector<Export>& no = refused_[size_t(peer)];
  if (!may_export || ex.size() >= size_t(kZcSlots) || no.size() >= size_t(kZcSlots)) return -1;
  if (std::find(no.begin(), no.end(), me) != no.end()) return -1;
  const int s = int(ex.size());
  try {
    comm_.notify_ipc_buffer(peer, kZcBufBase + uint32_t(s), r.base, r.bytes, 1);
  } catch (const Error& e) {
    // Registry full or an allocation the backend does not export: staged (correct, slower), and
    // not tried again for this allocation.
    no.push_back(me);  // Info, not Warn: e.g. every VMM allocation without a shareable handle
    common::log_line(LogLevel::Info, comm_.options().log_level,
                     common::format("stream: rank {} could not export a receive buffer ({}, {} bytes) to rank {} for "
                                    "zero-copy ({}); NCCL-form messages into it stay staged",
                                    comm_.rank(), static_cast<const void*>(r.base), r.bytes, peer, e.what()));
    return -1;
  }
  ex.push_back(me);
  common::log_line(
      LogLevel::Trace, comm_.options().log_level,
      common::format("stream: rank {} exported receive allocation {} ({} bytes) to rank {} as zero-copy slot {}",
                     comm_.rank(), static_cast<const void*>(r.base), r.bytes, peer, s));
  return s;
}

bool StreamZeroCopy::seen(int peer, int slot) const {
  return seen_.as<volatile uint8_t>()[size_t(peer) * kZcSlots + size_t(slot)] != 0;
}

int StreamZeroCopy::seen_count(int peer) const {
  int n = 0;
  for (int s = 0; s < kZcSlots; ++s) n += seen(peer, s) ? 1 : 0;
  return n;
}

void StreamZeroCopy::poll(int peer) {
  int& b = bound_[size_t(peer)];
  while (b < kZcSlots) {
    size_t len = 0;
    std::shared_ptr<void> hold;
    void* base = nullptr;
    try {
      base = comm_.try_map_published(peer, kZcBufBase + uint32_t(b), 1, &len, &hold);
    } catch (const PeerLostError&) {
      throw;  // the send reports it
    } catch (const Error& e) {
      // Freed before we looked, or a handle this process cannot open (or a forged one): never
      // acknowledged, so the receiver keeps staging into that allocation.
      common::log_line(
          LogLevel::Warn, comm_.options().log_level,
          common::format("stream: rank {} skips zero-copy slot {} of rank {}: {}", comm_.rank(), b, peer, e.what()));
      ++b;
      continue;
    }
    if (!base) return;
    holds_.push_back(std::move(hold));
    pending_.push_back(Pending{peer, b, reinterpret_cast<uint64_t>(base), uint64_t(len)});
    ++b;
  }
}

void StreamZeroCopy::fill(StreamLaunchHeader& L, const std::vector<PairSection*>& remote, bool binds) const {
  L.zc_table = table_.as<ZcEntry>();
  L.zc_seen = seen_.as<uint8_t>();
  L.nbinds = 0;
  if (!binds) return;
  for (const Pending& p : pending_) {
    if (L.nbinds == kMaxLaunchBinds) break;
    ZcBind& z = L.binds[L.nbinds++];
    z.base = p.base;
    z.size = p.size;
    z.remote = remote[size_t(p.peer)];
    z.peer = p.peer;
    z.slot = p.slot;
  }
}

void StreamZeroCopy::committed(int n) {
  if (n > 0) pending_.erase(pending_.begin(), pending_.begin() + n);
}

}  // namespace peerlink::detail
