// Stream engine: setup (area, publication under the reserved id, binding of the peers' areas) and
// the calls (their argument checks: stream_args.cpp). Groups, self pairs and the per-peer broken state:
// stream_group.cpp. What the backend decides (geometry, area initialization, zero-copy candidates)
// and data movement: the runner (stream_runner.h), made here from the backend's kind.
#include "stream/stream_p2p.h"

#include "common/format.h"
#include "peerlink/errors.h"
#include "transport/services.h"

namespace peerlink::detail {

using namespace peerlink::stream;

StreamEngine& stream_engine(CommServices& comm) {
  comm.check_usable();
  return comm.get_or_create<StreamEngine>([&] { return std::make_shared<StreamEngine>(comm); });
}

void stream_rethrow_async_error(CommServices& comm) {
  // Held: close() frees the engine only after our caller's call ended.
  if (std::shared_ptr<StreamEngine> engine = comm.find<StreamEngine>()) engine->rethrow_async_error();
}

StreamEngine::StreamEngine(CommServices& comm) : state_(comm) {
  state_.rank = comm.rank();
  state_.world = comm.world_size();
  const int world = state_.world;
  runner_ = comm.backend().is_host() ? make_host_stream_runner(state_) : make_gpu_stream_runner(state_);
  state_.remote.assign(world, nullptr);
  state_.in_process.assign(world, 0);
  state_.remote_hold.resize(world);
  state_.pub_completed.assign(world, 0);
  state_.broken.resize(world);

  gpu::Backend& be = comm.backend();
  state_.area = be.alloc(state_.area_len);
  try {
    AreaHeader h{};
    h.magic = kAreaMagic;
    h.world = uint64_t(world);
    h.slots = state_.slots;
    h.chunk = state_.chunk;
    h.section_bytes = state_.sec_bytes;
    h.ll_max = state_.ll_max;
    h.direct_min = state_.direct_min;
    h.direct_ipc_min = state_.direct_ipc_min;
    runner_->init_area(h);
    // Published to every peer now (non-blocking), so a peer's first call with this rank only waits
    // for this rank to have made any stream call, never for a call with that peer in particular.
    for (int q = 0; q < world; ++q)
      if (q != state_.rank) comm.notify_ipc_buffer(q, kAreaBufId, state_.area, state_.area_len, 1);
  } catch (...) {
    try {
      be.free(state_.area);
    } catch (...) {
    }
    throw;
  }
}

StreamEngine::~StreamEngine() {
  runner_->close();  // no kernel of ours may still touch the area (bounded wait)
  state_.remote_hold.clear();
  try {
    state_.comm.backend().free(state_.area);
  } catch (...) {
  }
  runner_.reset();  // its events and error word
}

// After the arguments were validated (bad input is reported as such even when the peer is gone).
// `alive`: PeerLostError at once when the peer is gone; recvs ask the runner
// (StreamRunner::recv_needs_live_peer says why each backend answers as it does).
void StreamEngine::check_pair(int peer, bool alive) {
  runner_->check_device_error();
  if (state_.broken[peer]) std::rethrow_exception(state_.broken[peer]);
  if (alive) state_.comm.check_peer_alive(peer);
}

// Maps peer's area (waits, bounded, for the peer's first stream call) and checks its geometry.
void StreamEngine::bind_peer(int peer) {
  StreamState& s = state_;
  if (s.remote[peer]) return;
  std::shared_ptr<void> hold;
  // The header first: an area of another geometry may be shorter than ours (the check below names why).
  void* base = s.comm.map_published(peer, kAreaBufId, 1, 0, kHeaderBytes, "stream setup", &hold);
  AreaHeader h{};
  s.comm.backend().copy_sync(&h, base, sizeof h);
  if (h.magic != kAreaMagic || h.world != uint64_t(s.world) || h.slots != s.slots || h.chunk != s.chunk ||
      h.section_bytes != s.sec_bytes || h.ll_max != s.ll_max || h.direct_min != s.direct_min ||
      h.direct_ipc_min != s.direct_ipc_min)
    throw Error(
        common::format("stream setup with rank {}: its area has magic {}, {} ranks, {} slots of {} bytes, sections of "
                       "{}, LL up to {} bytes, zero-copy from {} / {} bytes; this rank expects {}/{}/{}/{}/{}/{} / {} "
                       "(different library builds or backends, or PEERLINK_STREAM_LL_MAX / PEERLINK_STREAM_DIRECT_MIN "
                       "/ PEERLINK_STREAM_DIRECT_IPC_MIN differs between ranks?)",
                       peer, h.magic, h.world, h.slots, h.chunk, h.section_bytes, h.ll_max, h.direct_min,
                       h.direct_ipc_min, s.world, s.slots, s.chunk, s.sec_bytes, s.ll_max, s.direct_min,
                       s.direct_ipc_min));
  bool in_process = false;
  base = s.comm.map_published(peer, kAreaBufId, 1, 0, s.area_len, "stream setup", &hold, &in_process);
  s.in_process[peer] = in_process ? 1 : 0;
  runner_->peer_bound(peer, base, in_process);
  s.remote[peer] = section(base, s.rank, s.sec_bytes);
  s.remote_hold[peer] = std::move(hold);
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
  op.dst = static_cast<char*>(state_.comm.map_published(peer, buf_id, version, offset, len, "send", &op.hold));
  bind_peer(peer);
  submit(std::move(op));
}

void StreamEngine::recv_pub(int peer, uint32_t buf_id, size_t offset, size_t len, void* stream) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  char* pub_ptr = check_recv_pub(peer, buf_id, offset, len);
  check_pair(peer, runner_->recv_needs_live_peer());
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
  const bool self = peer == state_.rank;  // matched with a recv of this rank in the group (queue_self)
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
  runner_->prepare_raw(op);
  submit(std::move(op));
}

int StreamEngine::zero_copy_slots_seen(int peer) const { return runner_->zero_copy_slots_seen(peer); }

void StreamEngine::rethrow_async_error() const { runner_->rethrow_async_error(); }

void StreamEngine::recv_raw(int peer, void* dst, size_t len, void* stream) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  const bool self = peer == state_.rank;  // matched with a send of this rank in the group (queue_self)
  check_raw(peer, dst, len, false);
  StreamOp op;
  op.kind = StreamOpKind::RecvRaw;
  op.peer = peer;
  op.dst = static_cast<char*>(dst);
  op.len = len;
  op.stream = stream;
  if (self) return queue_self(std::move(op));
  check_pair(peer, runner_->recv_needs_live_peer());
  bind_peer(peer);
  runner_->prepare_raw(op);
  submit(std::move(op));
}

}  // namespace peerlink::detail
