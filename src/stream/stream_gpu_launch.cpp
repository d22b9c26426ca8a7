// GPU runner of the stream engine: a batch as one StreamLaunch per stream (its channels, its grid),
// each validated before any is enqueued (a refused group moves nothing), then enqueued with no host
// synchronization and nothing allocated or copied at enqueue, so the launch can be captured in a graph.
#include <algorithm>
#include <vector>

#include "common/format.h"
#include "gpu/runtime.h"
#include "peerlink/errors.h"
#include "stream/stream_gate.h"
#include "stream/stream_gpu_runner.h"
#include "stream/stream_launch.h"
#include "stream/stream_zc.h"
#include "transport/services.h"

namespace peerlink::detail {

static_assert(int(StreamOpKind::LocalCopy) == stream::kChLocalCopy, "a LocalCopy op's channel kind is its op kind");

using namespace peerlink::stream;

// Blocks per channel, by what each has to move in this launch (known here: lengths are not baked
// into any device state, so a replayed graph moves the same sizes with the same grid):
//   published send   one block per kPubBytesPerBlock of its largest message (pub_ll_blocks() for an
//                    LL message: one line per thread), each message split across all
//                    of them, up to the channel cap;
//   local copy       one block per kLocalBytesPerBlock of its ops (a send to this rank itself);
//   published recv   one block (flags only), or pub_ll_blocks() of an LL message when it is the
//                    channel's only op in the launch (the blocks read and zero their own lines);
//   NCCL form        one block per staging chunk or LL piece of its messages, up to the cap (blocks
//                    take whole chunks round robin; more than the chunk count would idle); a
//                    zero-copy recv counts one (block 0 waits for it, the others skip it); a send
//                    channel with a zero-copy candidate may take kDirectChannelBlocks; a channel of
//                    more than two slot rings of staged chunks gets three quarters of the slots;
// The grid stays within one block per multiprocessor (all resident: stream_launch.h): the largest
// channels give blocks back until it fits. Recv channels come first in the grid (they post credits
// and flags that the peer's sends wait for).
int GpuStreamRunner::channel_blocks_wanted(const StreamLaunch& L, int c) const {
  const DevChannel& ch = L.ch[c];
  uint64_t cap = uint64_t(std::max(1, channel_blocks_));
  bool zc_send = false;  // an NCCL-form send with a zero-copy candidate
  // Between processes only once a receive buffer of the peer is mapped: a staged run is faster
  // with fewer blocks (below).
  const bool zc_likely = ch.direct == kDirectLocal || (ch.direct == kDirectIpc && zc_->bound_any(ch.peer));
  if (ch.kind == int(StreamOpKind::SendRaw) && zc_likely)
    for (int i = 0; i < ch.nops; ++i)
      zc_send |= is_direct(L.ops[ch.first_op + i].len, direct_min_of(ch.direct, st_.direct_min, st_.direct_ipc_min), st_.ll_max);
  if (zc_send && st_.comm.options().stream_blocks <= 0) cap = kDirectChannelBlocks;
  uint64_t w = 1;
  if (ch.kind == int(StreamOpKind::SendPub)) {
    uint64_t mx = 0;
    for (int i = 0; i < ch.nops; ++i) {
      const uint64_t len = L.ops[ch.first_op + i].len;
      mx = std::max<uint64_t>(
          mx, is_ll(len, st_.ll_max) ? pub_ll_blocks(len) : (len + kPubBytesPerBlock - 1) / kPubBytesPerBlock);
    }
    w = mx;
  } else if (ch.kind == kChLocalCopy) {
    uint64_t bytes = 0;
    for (int i = 0; i < ch.nops; ++i) bytes += L.ops[ch.first_op + i].len;
    w = (bytes + kLocalBytesPerBlock - 1) / kLocalBytesPerBlock;
  } else if (ch.kind == int(StreamOpKind::RecvPub)) {
    const uint64_t len = L.ops[ch.first_op].len;
    if (ch.nops == 1 && is_ll(len, st_.ll_max)) w = pub_ll_blocks(len);
  } else {
    w = 0;
    for (int i = 0; i < ch.nops; ++i) {
      const DevOp& op = L.ops[ch.first_op + i];
      // A zero-copy recv is one block's wait (stream_direct_device.h): its chunks are never staged.
      // Between processes the kernel decides; one block once a recv found its slot acknowledged
      // (from then on it always is), else as many as staging needs.
      const bool zc = (op.flags & kOpDirectOk) || ((op.flags & kOpDirectIpc) && zc_->seen(ch.peer, int(op.buf_id)));
      w += zc ? 1 : raw_chunks(op.len, st_.chunk, st_.ll_max);
    }
    // A long run of staged chunks: fewer blocks than slots, so a block can stage its next chunk
    // in a free slot while its last one is still being copied out (with one block per slot each
    // waits for its own chunk to come back). Between processes, 128 MB sendrecv / one way, 64 /
    // 48 / 32 blocks: 449.8 / 413.7, 407.7 / 391.1, 406.0 / 397.2 us; 32 MB 115.3 / 112.0,
    // 110.6 / 107.8, 109.9 / 106.6; 8 MB 64 blocks best (33.0 / 32.4 against 34.6 / 33.9 with 48)
    // (2x H200).
    if (!zc_send && w > 2 * st_.slots && st_.comm.options().stream_blocks <= 0 && cap > st_.slots * 3 / 4) cap = st_.slots * 3 / 4;
  }
  return int(std::max<uint64_t>(1, std::min(w, cap)));
}

void GpuStreamRunner::assign_blocks(StreamLaunch& L) const {
  std::vector<int> want(size_t(L.nch), 1);
  for (int c = 0; c < L.nch; ++c) want[size_t(c)] = channel_blocks_wanted(L, c);
  int total = 0;
  for (int w : want) total += w;
  // Ranks of one process on one GPU (devices 0,0 in the tests) share it: with the whole device per
  // launch, StreamGpuInPlace.OneProcess (staged grids of up to 96 + 48 blocks on each rank) waited
  // out its timeout on 2x H100; with half of it each it passes.
  const int budget = std::max(grid_cap_ / gpu_sharers_, L.nch);
  while (total > budget) {
    auto it = std::max_element(want.begin(), want.end());
    --*it;
    --total;
  }
  int next = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (int c = 0; c < L.nch; ++c) {
      const bool recv = L.ch[c].kind == int(StreamOpKind::RecvPub) || L.ch[c].kind == int(StreamOpKind::RecvRaw);
      if (recv != (pass == 0)) continue;
      L.ch[c].first_block = int16_t(next);
      L.ch[c].nblocks = int16_t(want[size_t(c)]);
      next += want[size_t(c)];
    }
  L.nblocks = next;
  // Not between ranks that share the GPU: a successor scheduled early under PDL holds multiprocessors
  // the other rank's blocks need (the collectives' graph replays timed out that way;
  // coll_state.cpp).
  L.pdl = pdl_ && gpu_sharers_ == 1 ? 1 : 0;
  uint64_t largest = 0;
  bool swap = false;  // an in-place zero-copy send holds two 32 KB units in the registers of kStreamThreads
  for (int c = 0; c < L.nch; ++c)
    for (int i = 0; i < L.ch[c].nops; ++i) {
      largest = std::max(largest, L.ops[L.ch[c].first_op + i].len);
      swap |= L.ch[c].kind == int(StreamOpKind::SendRaw) && (L.ops[L.ch[c].first_op + i].flags & kOpGateZc);
    }
  const int fixed = st_.comm.options().stream_threads;
  L.threads = swap ? kStreamThreads : fixed > 0 ? fixed : stream_threads_for(largest);
}

// One stream's share of a batch: its launch, whether the copy engines take it (stream_ce.cpp), and
// the peer mappings the launch writes.
struct GpuStreamRunner::GpuLaunch {
  void* stream = nullptr;
  StreamLaunch launch{};
  bool ce = false;
  std::vector<std::shared_ptr<void>> holds;
};

void GpuStreamRunner::run(std::vector<StreamOp>& ops) {
  // Group by stream, keeping call order; validate every launch before enqueuing any, so a refused
  // group moves nothing.
  std::vector<void*> streams;
  for (const StreamOp& op : ops)
    if (std::find(streams.begin(), streams.end(), op.stream) == streams.end()) streams.push_back(op.stream);
  std::vector<GpuLaunch> batch(streams.size());
  for (size_t s = 0; s < streams.size(); ++s) plan_launch(ops, streams[s], batch[s]);
  // Finished launches let go of their mappings; never while capturing (no event queries inside a
  // capture: with the thread-local capture mode they would invalidate it).
  bool capturing = false;
  for (void* st : streams) capturing |= gpu::stream_is_capturing(st);
  if (!capturing) reap_inflight(false);
  const int bind_launch = fill_zero_copy(batch, capturing);
  const int prev = gpu::current_device();
  if (prev != st_.comm.device()) gpu::set_device(st_.comm.device());
  try {
    for (size_t s = 0; s < batch.size(); ++s) enqueue_launch(batch[s], int(s) == bind_launch);
  } catch (...) {
    if (prev != st_.comm.device()) gpu::set_device(prev);
    throw;
  }
  if (prev != st_.comm.device()) gpu::set_device(prev);
}

// The launch of `stream`'s ops of the batch: the engine's parameters, the ops by channel, then the
// in-place gates and the grid.
void GpuStreamRunner::plan_launch(const std::vector<StreamOp>& ops, void* stream, GpuLaunch& b) const {
  b.stream = stream;
  StreamLaunch& L = b.launch;
  L = StreamLaunch{};
  L.slots = uint32_t(st_.slots);
  L.chunk = st_.chunk;
  L.timeout_ns = uint64_t(st_.comm.options().timeout.count()) * 1000000ull;
  L.error = error_;  // mapped pinned memory: the same address on the device (UVA), as the collectives use it
  L.acq_load = st_.comm.options().stream_acquire_load ? 1 : 0;
  L.ll_max = st_.ll_max;
  L.ll_slot = pub_ll_slot_bytes(st_.ll_max);
  L.staging_off = staging_offset(true, st_.ll_max);
  L.direct_min = st_.direct_min;
  L.direct_ipc_min = st_.direct_ipc_min;
  std::vector<const StreamOp*> mine;
  for (const StreamOp& op : ops)
    if (op.stream == stream) mine.push_back(&op);
  b.ce = ce_eligible(mine);
  add_channels(L, mine, b.holds);
  gate_in_place(L, st_.chunk, st_.ll_max);  // before assign_blocks: a staged gated recv takes its chunks' blocks
  assign_blocks(L);
}

// Channels in order of first appearance; each channel's ops contiguous, in call order.
void GpuStreamRunner::add_channels(StreamLaunch& L, const std::vector<const StreamOp*>& mine,
                                   std::vector<std::shared_ptr<void>>& holds) const {
  int nops = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    const StreamOp& head = *mine[i];
    bool seen = false;
    for (int c = 0; c < L.nch; ++c) seen |= L.ch[c].peer == head.peer && L.ch[c].kind == int(head.kind);
    if (seen) continue;
    if (L.nch == kMaxLaunchChannels)
      throw UnsupportedError(common::format(
          "a group on one stream uses more than {} (peer, direction, form) channels; split it across streams",
          kMaxLaunchChannels));
    DevChannel& ch = L.ch[L.nch++];
    ch.kind = int16_t(head.kind);
    ch.peer = int16_t(head.peer);
    ch.first_op = int16_t(nops);
    const bool self = head.kind == StreamOpKind::LocalCopy;
    ch.mine = self ? nullptr : st_.mine(head.peer);
    ch.remote = self ? nullptr : st_.remote[head.peer];
    const bool raw = head.kind == StreamOpKind::SendRaw || head.kind == StreamOpKind::RecvRaw;
    ch.direct = !raw ? 0 : st_.in_process[head.peer] ? kDirectLocal : zc_ ? kDirectIpc : 0;
    for (size_t j = i; j < mine.size(); ++j) {
      const StreamOp& op = *mine[j];
      if (op.peer != head.peer || op.kind != head.kind) continue;
      if (nops == kMaxLaunchOps)
        throw UnsupportedError(
            common::format("a group on one stream holds more than {} operations on a GPU; split it into several groups",
                           kMaxLaunchOps));
      DevOp& d = L.ops[nops++];
      d.src = op.src;
      d.dst = op.dst;
      d.len = op.len;
      d.offset = op.offset;
      d.buf_id = op.buf_id;
      d.flags = op.direct_ok ? kOpDirectOk : op.zc_slot >= 0 ? kOpDirectIpc : 0;
      if (op.zc_slot >= 0) d.buf_id = uint32_t(op.zc_slot);
      ++ch.nops;
      if (op.hold) holds.push_back(op.hold);
    }
  }
}

// Zero-copy binds ride on the first launch that is not captured (a replayed bind would only
// rewrite the same entry) and is a kernel (not the copy-engine path's): returns its index, or -1.
int GpuStreamRunner::fill_zero_copy(std::vector<GpuLaunch>& batch, bool capturing) const {
  int bind_launch = -1;
  for (size_t s = 0; s < batch.size() && zc_; ++s) {
    const bool binds = !capturing && bind_launch < 0 && !batch[s].ce;
    if (binds) bind_launch = int(s);
    zc_->fill(batch[s].launch, st_.remote, binds);
  }
  return bind_launch;
}

// Enqueues one launch; an eager one keeps its mappings until its event completes (reap_inflight).
void GpuStreamRunner::enqueue_launch(GpuLaunch& b, bool binds) {
  if (b.ce) launch_ce(b.launch, b.stream);
  else launch_stream_batch(b.launch, b.stream);
  if (binds) zc_->committed(b.launch.nbinds);
  if (gpu::stream_is_capturing(b.stream)) {
    // A graph may replay this launch at any time: its mappings stay open with the engine
    // (once each: captures of the same buffers add nothing).
    for (auto& h : b.holds)
      if (std::find(graph_holds_.begin(), graph_holds_.end(), h) == graph_holds_.end()) graph_holds_.push_back(h);
    return;
  }
  Inflight f;
  if (!free_events_.empty()) {
    f.event = free_events_.back();
    free_events_.pop_back();
  } else {
    f.event = gpu::event_create();
  }
  f.holds = std::move(b.holds);
  gpu::event_record(f.event, b.stream);
  inflight_.push_back(std::move(f));
}

}  // namespace peerlink::detail
