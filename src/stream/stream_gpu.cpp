// GPU runner of the stream engine (stream_gpu_runner.h), its state: geometry and setup, the
// checks only GPUs need, zero-copy candidates, what the kernels recorded in the host-mapped error
// word (reported on the next call), and the launches still in flight (their peer mappings stay
// open until they have finished).
#include <algorithm>
#include <chrono>
#include <thread>

#include "common/format.h"
#include "common/log.h"
#include "gpu/runtime.h"
#include "peerlink/errors.h"
#include "stream/stream_gpu_runner.h"
#include "stream/stream_launch.h"
#include "stream/stream_zc.h"
#include "transport/services.h"

namespace peerlink::detail {

using namespace peerlink::stream;

namespace {
// 64 slots of 128 KB per pair (8 MB; 56 MB per rank with 8 ranks). Each NCCL-form chunk is moved by
// one block (stream_raw_device.h), so the slot count is also how many blocks can write at once: 64
// blocks keep NVLink saturated (stream_launch.h). 128 KB per block per flag amortizes the per-chunk
// cost (one system fence + one flag, ~1-2 us) over ~3 us of a block's copy, while the receiver's
// copy-out (local HBM, several TB/s) and credit return overlap the next chunks. (Was 4 x 1 MB moved
// by one block: 18 GB/s on 2x H200.)
constexpr size_t kGpuChunk = 128 << 10, kGpuSlots = 64;
constexpr bool pow2(size_t x) { return x && (x & (x - 1)) == 0; }
static_assert(pow2(kGpuChunk) && pow2(kGpuSlots) && pow2(kLLPiece) && pow2(kLLSmallPiece),
              "the kernels index slots and count chunks with masks and shifts (stream_device.h)");
static_assert(kGpuSlots <= size_t(kMaxSlots), "slots");
static_assert(kLLMaxCap <= size_t(kMaxSlots) * kLLPiece, "an LL message fits the NCCL-form slots");
}  // namespace

std::unique_ptr<StreamRunner> make_gpu_stream_runner(StreamState& state) {
  return std::make_unique<GpuStreamRunner>(state);
}

GpuStreamRunner::GpuStreamRunner(StreamState& st) : st_(st) {
  CommServices& comm = st.comm;
  const Options& o = comm.options();
  st.slots = kGpuSlots;
  st.chunk = kGpuChunk;
  st.ll_max = round_up(o.stream_ll_max, 8);
  st.direct_min = o.stream_direct_min;
  st.direct_ipc_min = o.stream_direct_ipc_min;
  st.sec_bytes = section_bytes(st.slots, st.chunk, true, st.ll_max);
  st.area_len = area_bytes(st.world, st.slots, st.chunk, true, st.ll_max);
  gpu::DeviceGuard dg(comm.device());  // the user's thread keeps its current device
  error_ = static_cast<uint32_t*>(gpu::host_alloc_mapped(64));
  try {
    // Every block of a launch must be resident at once (channels of a group wait on each other
    // through the peer): one block per multiprocessor fits by construction (stream_kernels.cu).
    grid_cap_ = std::max(1, gpu::multiprocessor_count(comm.device()));
    // Options::max_blocks (NCCL's maxCTAs) caps every launch too; a launch still gets one block
    // per channel (assign_blocks).
    if (o.max_blocks > 0) grid_cap_ = std::min(grid_cap_, o.max_blocks);
    channel_blocks_ = o.stream_blocks > 0 ? o.stream_blocks : kMaxChannelBlocks;
    const int cc = gpu::compute_capability(comm.device());
    pdl_ = (o.stream_pdl < 0 ? cc >= 90 : o.stream_pdl != 0) && cc >= 90;
    if (st.direct_ipc_min > 0) zc_ = std::make_unique<StreamZeroCopy>(comm, st.world);
    ce_min_ = o.stream_ce_min;
    if (ce_min_ > 0) {  // created now: never while a caller's stream is being captured
      ce_events_.push_back(gpu::EventOwner::create(comm.device()));
      for (int l = 1; l < o.stream_ce_lanes; ++l) {
        ce_lanes_.push_back(gpu::StreamOwner::create(comm.device()));
        ce_events_.push_back(gpu::EventOwner::create(comm.device()));
      }
    }
  } catch (...) {
    try {
      gpu::host_free_mapped(error_);
    } catch (...) {
    }
    throw;
  }
}

GpuStreamRunner::~GpuStreamRunner() {
  try {
    for (void* e : free_events_) gpu::event_destroy(e);
    if (error_) gpu::host_free_mapped(error_);
  } catch (...) {
  }
}

void GpuStreamRunner::init_area(const AreaHeader& h) {
  gpu::DeviceGuard dg(st_.comm.device());
  gpu::memset_sync(st_.area, 0, st_.area_len);
  st_.comm.backend().copy_sync(st_.area, &h, sizeof h);
  gpu::stream_sync(nullptr);  // zeroed before any peer can learn the handle
}

void GpuStreamRunner::close() noexcept {
  try {
    reap_inflight(true);  // no kernel of ours may still touch the area (bounded wait)
  } catch (...) {
  }
  graph_holds_.clear();
  zc_.reset();  // its mappings of the peers' receive buffers; no kernel of ours runs any more
}

void GpuStreamRunner::peer_bound(int q, void* base, bool in_process) {
  if (in_process && gpu::pointer_device(base) == st_.comm.device()) ++gpu_sharers_;
}

void GpuStreamRunner::check_peer_path(int peer, const char* what) const {
  // The kernels store straight into the peer's memory: a pair without peer access (relay path) has
  // no stream-ordered path yet.
  if (st_.comm.path_to(peer) != Path::Direct)
    throw UnsupportedError(common::format(
        "stream-ordered send/recv with rank {}: the pair uses the {} path ({}); only direct pairs are supported", peer,
        to_string(st_.comm.path_to(peer)), st_.comm.path_reason(peer)));
}

// The kernels read and write any device-accessible memory of this device.
void GpuStreamRunner::check_buffer(const void* p, size_t len, const char* what, int peer) const {
  if (len == 0) return;
  if (!gpu::is_device_pointer(p))
    throw InvalidArgument(common::format(
        "{}{}: {} is not device memory ({} bytes); stream-ordered calls on a GPU communicator take device buffers",
        what, peer, p, len));
}

void GpuStreamRunner::prepare_raw(StreamOp& op) {
  const int peer = op.peer;
  const size_t len = op.len;
  if (op.kind == StreamOpKind::SendRaw) {
    // Between processes: map the receive buffers the peer exported since (stream_zc.h), never inside
    // a capture (no driver calls that could invalidate it).
    if (zc_ && !st_.in_process[peer] && is_direct(len, st_.direct_ipc_min, st_.ll_max) &&
        !gpu::stream_is_capturing(op.stream))
      zc_->poll(peer);
    return;
  }
  // Zero-copy candidate between ranks of this process: the peer's kernel may write dst itself only
  // when its GPU reaches it: memory of this rank's device from cudaMalloc (peer access was enabled
  // when the peer mapped our area, which is on this device). VMM and memory-pool memory carry their
  // own access lists, and another device's memory may lack peer access: those are staged.
  if (st_.in_process[peer] && is_direct(len, st_.direct_min, st_.ll_max))
    op.direct_ok = gpu::pointer_device(op.dst) == st_.comm.device() && gpu::ipc_capable(op.dst);
  // Between processes: dst's allocation exported to the peer (stream_zc.h); none exported while
  // capturing (no driver calls that could invalidate the capture).
  uint64_t zc_off = 0;
  if (zc_ && !st_.in_process[peer] && is_direct(len, st_.direct_ipc_min, st_.ll_max)) {
    op.zc_slot = zc_->offer(peer, op.dst, len, !gpu::stream_is_capturing(op.stream), &zc_off);
    op.offset = zc_off;
  }
}

void GpuStreamRunner::add_self_copy(std::vector<StreamOp>& ops, const StreamOp& send, const StreamOp& recv) {
  StreamOp op;
  op.kind = StreamOpKind::LocalCopy;
  op.peer = st_.rank;
  op.src = send.src;
  op.dst = recv.dst;
  op.len = send.len;
  op.stream = send.stream;
  ops.push_back(std::move(op));
}

int GpuStreamRunner::zero_copy_slots_seen(int peer) const { return zc_ ? zc_->seen_count(peer) : 0; }

// The error that error word `w` (non-zero, not a mismatch) names, as an exception. Reads only:
// the peek of another thread (async_error) and the owner's next call build the same one.
std::exception_ptr GpuStreamRunner::device_error(uint32_t w) const {
  const uint32_t code = w & 0xff;
  const int peer = int((w >> 8) & 0xffff);
  try {
    if (peer < 0 || peer >= st_.world || peer == st_.rank)
      throw Error(common::format("stream engine: corrupt error word {}", w));
    st_.comm.check_peer_alive(peer);  // PeerLostError when it died
    if (code == kErrRawLength)
      throw InvalidArgument(
          common::format("recv from rank {} (stream-ordered, NCCL form): the matching send had a different length; the "
                         "pair is stopped (as with mismatched ncclSend/ncclRecv)",
                         peer));
    if (code == kErrAborted)
      throw Error(
          common::format("stream-ordered send/recv with rank {}: the pair was stopped after a failure (the peer's or "
                         "an earlier one on this rank: a timeout, a length mismatch or a protocol violation)",
                         peer));
    if (code == kErrTimeout)
      throw TimeoutError(
          common::format("stream-ordered send/recv with rank {}: a device-side wait made no progress within {} ms (the "
                         "peer stalled or never issued the matching call)",
                         peer, st_.comm.options().timeout.count()));
    throw Error(common::format("stream-ordered send/recv with rank {}: protocol violation seen on the device (code {})",
                               peer, code));
  } catch (...) {
    return std::current_exception();
  }
}

void GpuStreamRunner::check_device_error() {
  uint32_t w = __atomic_load_n(error_, __ATOMIC_ACQUIRE);
  if (w == 0) return;
  const int peer = int((w >> 8) & 0xffff);
  if ((w & 0xff) == kErrMismatch && peer >= 0 && peer < st_.world && peer != st_.rank) {
    // The channel stayed in step (the sender wrote nothing, the receiver drained): report, go on.
    __atomic_store_n(error_, 0u, __ATOMIC_RELEASE);
    throw InvalidArgument(
        common::format("recv from rank {} (stream-ordered): a message's (buffer, offset, len) or length differed from "
                       "the matching send; nothing was written (except by a copy-engine send, Options::stream_ce_min, "
                       "which writes the range it named)",
                       peer));
  }
  std::exception_ptr e = device_error(w);
  // The kernels of this pair stop at once from now on (its abort word is set): the pair is broken.
  if (peer >= 0 && peer < st_.world && peer != st_.rank) st_.broken[peer] = e;
  std::rethrow_exception(e);
}

void GpuStreamRunner::rethrow_async_error() const {
  if (!error_) return;
  uint32_t w = __atomic_load_n(error_, __ATOMIC_ACQUIRE);
  if (w == 0 || (w & 0xff) == kErrMismatch) return;  // a mismatch leaves the pair usable: not asynchronous
  std::rethrow_exception(device_error(w));
}

void GpuStreamRunner::reap_inflight(bool wait_all) {
  auto deadline = std::chrono::steady_clock::now() + st_.comm.options().timeout;
  size_t i = 0;
  while (i < inflight_.size()) {
    Inflight& f = inflight_[i];
    bool done = gpu::event_query(f.event);
    if (!done && wait_all && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      continue;
    }
    if (!done) {
      if (!wait_all) break;  // launches finish roughly in order: the rest is younger
      graph_holds_.insert(graph_holds_.end(), f.holds.begin(), f.holds.end());  // timed out: keep them
      ++i;
      continue;
    }
    free_events_.push_back(f.event);
    inflight_.erase(inflight_.begin() + long(i));  // in launch order, so this is usually the front
  }
}

}  // namespace peerlink::detail
