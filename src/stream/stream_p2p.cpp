// Stream engine: setup (area, publication under the reserved id, binding of the peers' areas) and
// the calls (their argument checks: stream_args.cpp). Groups, self pairs and the per-peer broken state:
// stream_group.cpp. Data movement: stream_host.cpp (host backend, synchronous) and stream_gpu.cpp +
// stream_kernels.cu (GPUs, stream-ordered).
#include "stream/stream_p2p.h"

#include <algorithm>
#include <cstring>

#include "common/format.h"
#include "common/log.h"
#include "gpu/owners.h"
#include "gpu/runtime.h"
#include "peerlink/errors.h"
#include "stream/stream_launch.h"
#include "stream/stream_zc.h"
#include "transport/services.h"

namespace peerlink::detail {

using namespace peerlink::stream;

namespace {
// Host: small chunks so CI exercises multi-chunk messages and slot reuse with small buffers.
// GPU: 64 slots of 128 KB per pair (8 MB; 56 MB per rank with 8 ranks). Each NCCL-form chunk is
// moved by one block (stream_raw_device.h), so the slot count is also how many blocks can write at
// once: 64 blocks keep NVLink saturated (stream_launch.h). 128 KB per block per flag amortizes the
// per-chunk cost (one system fence + one flag, ~1-2 us) over ~3 us of a block's copy, while the
// receiver's copy-out (local HBM, several TB/s) and credit return overlap the next chunks.
// (Was 4 x 1 MB moved by one block: 18 GB/s on 2x H200.)
constexpr size_t kHostChunk = 8 << 10, kHostSlots = 8;
constexpr size_t kGpuChunk = 128 << 10, kGpuSlots = 64;
constexpr bool pow2(size_t x) { return x && (x & (x - 1)) == 0; }
static_assert(pow2(kHostChunk) && pow2(kHostSlots) && pow2(kGpuChunk) && pow2(kGpuSlots) && pow2(kLLPiece) &&
                  pow2(kLLSmallPiece),
              "the kernels index slots and count chunks with masks and shifts (stream_device.h)");
}  // namespace

StreamEngine& stream_engine(CommServices& comm) {
  comm.check_usable();
  return comm.get_or_create<StreamEngine>([&] { return std::make_shared<StreamEngine>(comm); });
}

void stream_rethrow_async_error(CommServices& comm) {
  // Held: close() frees the engine only after our caller's call ended.
  if (std::shared_ptr<StreamEngine> engine = comm.find<StreamEngine>()) engine->rethrow_async_error();
}

StreamEngine::StreamEngine(CommServices& comm) : comm_(comm) {
  rank_ = comm.rank();
  world_ = comm.world_size();
  gpu::Backend& be = comm.backend();
  host_ = be.is_host();
  slots_ = host_ ? kHostSlots : kGpuSlots;
  chunk_ = host_ ? kHostChunk : kGpuChunk;
  static_assert(kHostSlots <= size_t(kMaxSlots) && kGpuSlots <= size_t(kMaxSlots), "slots");
  ll_max_ = host_ ? 0 : round_up(comm.options().stream_ll_max, 8);
  direct_min_ = host_ ? 0 : comm.options().stream_direct_min;
  direct_ipc_min_ = host_ ? 0 : comm.options().stream_direct_ipc_min;
  static_assert(kLLMaxCap <= size_t(kMaxSlots) * kLLPiece, "an LL message fits the NCCL-form slots");
  sec_bytes_ = section_bytes(slots_, chunk_, !host_, ll_max_);
  area_len_ = area_bytes(world_, slots_, chunk_, !host_, ll_max_);
  remote_.assign(world_, nullptr);
  in_process_.assign(world_, 0);
  remote_hold_.resize(world_);
  pub_completed_.assign(world_, 0);
  broken_.resize(world_);

  area_ = be.alloc(area_len_);
  try {
    AreaHeader h{};
    h.magic = kAreaMagic;
    h.world = uint64_t(world_);
    h.slots = slots_;
    h.chunk = chunk_;
    h.section_bytes = sec_bytes_;
    h.ll_max = ll_max_;
    h.direct_min = direct_min_;
    h.direct_ipc_min = direct_ipc_min_;
    if (host_) {
      std::memset(area_, 0, area_len_);  // counters start at 0 (flags need no reset later)
      std::memcpy(area_, &h, sizeof h);
    } else {
      gpu::DeviceGuard dg(comm.device());  // the user's thread keeps its current device
      gpu::memset_sync(area_, 0, area_len_);
      be.copy_sync(area_, &h, sizeof h);
      gpu::stream_sync(nullptr);  // zeroed before any peer can learn the handle
      error_ = static_cast<uint32_t*>(gpu::host_alloc_mapped(64));
      // Every block of a launch must be resident at once (channels of a group wait on each other
      // through the peer): one block per multiprocessor fits by construction (stream_kernels.cu).
      grid_cap_ = std::max(1, gpu::multiprocessor_count(comm.device()));
      const Options& o = comm.options();
      // Options::max_blocks (NCCL's maxCTAs) caps every launch too; a launch still gets one block
      // per channel (assign_blocks).
      if (o.max_blocks > 0) grid_cap_ = std::min(grid_cap_, o.max_blocks);
      channel_blocks_ = o.stream_blocks > 0 ? o.stream_blocks : kMaxChannelBlocks;
      const int cc = gpu::compute_capability(comm.device());
      pdl_ = (o.stream_pdl < 0 ? cc >= 90 : o.stream_pdl != 0) && cc >= 90;
      if (direct_ipc_min_ > 0) zc_ = std::make_unique<StreamZeroCopy>(comm, world_);
      ce_min_ = o.stream_ce_min;
      if (ce_min_ > 0) {  // created now: never while a caller's stream is being captured
        ce_events_.push_back(gpu::EventOwner::create(comm.device()));
        for (int l = 1; l < o.stream_ce_lanes; ++l) {
          ce_lanes_.push_back(gpu::StreamOwner::create(comm.device()));
          ce_events_.push_back(gpu::EventOwner::create(comm.device()));
        }
      }
    }
    // Published to every peer now (non-blocking), so a peer's first call with this rank only waits
    // for this rank to have made any stream call, never for a call with that peer in particular.
    for (int q = 0; q < world_; ++q)
      if (q != rank_) comm.notify_ipc_buffer(q, kAreaBufId, area_, area_len_, 1);
  } catch (...) {
    try {
      be.free(area_);
      if (error_) gpu::host_free_mapped(error_);
    } catch (...) {
    }
    throw;
  }
}

StreamEngine::~StreamEngine() {
  try {
    if (!host_) reap_inflight(true);  // no kernel of ours may still touch the area (bounded wait)
  } catch (...) {
  }
  graph_holds_.clear();
  zc_.reset();  // its mappings of the peers' receive buffers; no kernel of ours runs any more
  remote_hold_.clear();
  try {
    comm_.backend().free(area_);
  } catch (...) {
  }
  try {
    for (void* e : free_events_) gpu::event_destroy(e);
    if (error_) gpu::host_free_mapped(error_);
  } catch (...) {
  }
}

// After the arguments were validated (bad input is reported as such even when the peer is gone).
// `alive`: PeerLostError at once when the peer is gone. Host-backend recvs pass false: a peer that
// closed after its sends completed left their bytes in this rank's own area, and the wait loop
// reports a lost peer only when nothing is there to take (with the check, such recvs failed in CI
// although their bytes had arrived). GPU recvs keep the check (their kernels would notice a lost
// peer only at the timeout).
void StreamEngine::check_pair(int peer, bool alive) {
  if (!host_) check_device_error();
  if (broken_[peer]) std::rethrow_exception(broken_[peer]);
  if (alive) comm_.check_peer_alive(peer);
}

// Maps peer's area (waits, bounded, for the peer's first stream call) and checks its geometry.
void StreamEngine::bind_peer(int peer) {
  if (remote_[peer]) return;
  std::shared_ptr<void> hold;
  // The header first: an area of another geometry may be shorter than ours (the check below names why).
  void* base = comm_.map_published(peer, kAreaBufId, 1, 0, kHeaderBytes, "stream setup", &hold);
  AreaHeader h{};
  comm_.backend().copy_sync(&h, base, sizeof h);
  if (h.magic != kAreaMagic || h.world != uint64_t(world_) || h.slots != slots_ || h.chunk != chunk_ ||
      h.section_bytes != sec_bytes_ || h.ll_max != ll_max_ || h.direct_min != direct_min_ ||
      h.direct_ipc_min != direct_ipc_min_)
    throw Error(
        common::format("stream setup with rank {}: its area has magic {}, {} ranks, {} slots of {} bytes, sections of "
                       "{}, LL up to {} bytes, zero-copy from {} / {} bytes; this rank expects {}/{}/{}/{}/{}/{} / {} "
                       "(different library builds or backends, or PEERLINK_STREAM_LL_MAX / PEERLINK_STREAM_DIRECT_MIN "
                       "/ PEERLINK_STREAM_DIRECT_IPC_MIN differs between ranks?)",
                       peer, h.magic, h.world, h.slots, h.chunk, h.section_bytes, h.ll_max, h.direct_min,
                       h.direct_ipc_min, world_, slots_, chunk_, sec_bytes_, ll_max_, direct_min_, direct_ipc_min_));
  bool in_process = false;
  base = comm_.map_published(peer, kAreaBufId, 1, 0, area_len_, "stream setup", &hold, &in_process);
  in_process_[peer] = in_process ? 1 : 0;
  if (in_process && !host_ && gpu::pointer_device(base) == comm_.device()) ++gpu_sharers_;
  remote_[peer] = section(base, rank_, sec_bytes_);
  remote_hold_[peer] = std::move(hold);
}

void StreamEngine::send_pub(int peer, const void* src, size_t len, uint32_t buf_id, size_t offset,
                            uint64_t version, void* stream) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  check_send_pub(peer, src, len, buf_id, offset, version);
  check_pair(peer);
  StreamOp op;
  op.kind = StreamOpKind::SendPub;
  op.peer = peer;
  op.src = static_cast<const char*>(src);
  op.len = len;
  op.buf_id = buf_id;
  op.offset = offset;
  op.version = version;
  op.stream = stream;
  // The destination first: its publication decides the rest of the arguments (stale version,
  // range) and needs no stream call of the peer; binding the peer's area waits for one.
  op.dst = static_cast<char*>(comm_.map_published(peer, buf_id, version, offset, len, "send", &op.hold));
  bind_peer(peer);
  submit(std::move(op));
}

void StreamEngine::recv_pub(int peer, uint32_t buf_id, size_t offset, size_t len, void* stream) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  char* pub_ptr = check_recv_pub(peer, buf_id, offset, len);
  check_pair(peer, !host_);
  bind_peer(peer);
  StreamOp op;
  op.kind = StreamOpKind::RecvPub;
  op.peer = peer;
  op.dst = pub_ptr ? pub_ptr + offset : nullptr;  // GPU: small messages arrive as LL lines, copied here
  op.len = len;
  op.buf_id = buf_id;
  op.offset = offset;
  op.stream = stream;
  submit(std::move(op));
}

void StreamEngine::send_raw(int peer, const void* src, size_t len, void* stream) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  const bool self = peer == rank_;  // matched with a recv of this rank in the group (queue_self)
  check_raw(peer, src, len, true);
  StreamOp op;
  op.kind = StreamOpKind::SendRaw;
  op.peer = peer;
  op.src = static_cast<const char*>(src);
  op.len = len;
  op.stream = stream;
  if (self) return queue_self(std::move(op));
  check_pair(peer);
  bind_peer(peer);
  // Between processes: map the receive buffers the peer exported since (stream_zc.h), never inside
  // a capture (no driver calls that could invalidate it).
  if (zc_ && !in_process_[peer] && is_direct(len, direct_ipc_min_, ll_max_) && !gpu::stream_is_capturing(stream))
    zc_->poll(peer);
  submit(std::move(op));
}

int StreamEngine::zero_copy_slots_seen(int peer) const { return zc_ ? zc_->seen_count(peer) : 0; }

void StreamEngine::recv_raw(int peer, void* dst, size_t len, void* stream) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  const bool self = peer == rank_;  // matched with a send of this rank in the group (queue_self)
  check_raw(peer, dst, len, false);
  StreamOp op;
  op.kind = StreamOpKind::RecvRaw;
  op.peer = peer;
  op.dst = static_cast<char*>(dst);
  op.len = len;
  op.stream = stream;
  if (self) return queue_self(std::move(op));
  check_pair(peer, !host_);
  bind_peer(peer);
  // Zero-copy candidate between ranks of this process: the peer's kernel may write dst itself only
  // when its GPU reaches it: memory of this rank's device from cudaMalloc (peer access was enabled
  // when the peer mapped our area, which is on this device). VMM and memory-pool memory carry their
  // own access lists, and another device's memory may lack peer access: those are staged.
  if (!host_ && in_process_[peer] && is_direct(len, direct_min_, ll_max_))
    op.direct_ok = gpu::pointer_device(dst) == comm_.device() && gpu::ipc_capable(dst);
  // Between processes: dst's allocation exported to the peer (stream_zc.h); none exported while
  // capturing (no driver calls that could invalidate the capture).
  uint64_t zc_off = 0;
  if (zc_ && !in_process_[peer] && is_direct(len, direct_ipc_min_, ll_max_)) {
    op.zc_slot = zc_->offer(peer, dst, len, !gpu::stream_is_capturing(stream), &zc_off);
    op.offset = zc_off;
  }
  submit(std::move(op));
}

}  // namespace peerlink::detail
