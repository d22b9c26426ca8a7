// Zero-copy path (CollAlgo::ZeroCopy), no staging through the scratch of layout.h: one crossing of
// the link per byte and no receiver-side copy. all_gather, all_to_all and broadcast push: recvbuf
// lies in a registered window (windows.cpp) on every rank at the same offset, and each rank copies
// its outgoing pieces straight into the peers' recvbufs. reduce and reduce_scatter pull: sendbuf
// lies in the window, and the reducing rank reads every peer's sendbuf in place. all_to_all in
// place swaps instead of pushing (as_swaps): no staging copy of the send range.
//
//   user stream A:  zc step (entry) | copy kernel (pushes + own piece) or pull kernel | ce step (exit)
// or, with Options::coll_zero_copy_ce, copy engines: the pushes split over the lanes (forked from
// A and joined back as in coll_ce.cpp) and the own piece on ce_streams[0], joined before the exit.
//
// Entry: a rank writes a peer's recvbuf only after that peer's entry flag, i.e. once the peer's
// stream reached this call (everything before it there, readers of recvbuf included, is done).
// The entry step also carries each rank's tag (window id, offset, shape): ranks that passed
// different offsets see it before any byte moves (host backend: every rank throws InvalidArgument;
// GPU: the kernel records kErrWindowMismatch, the copies already enqueued still run but stay inside
// the windows, and the next call throws). Exit: a rank signals after its pushes have landed (the
// step kernel starts after the joined copies completed) and leaves once every peer's pushes into
// its recvbuf have landed (a pulling rank signals once its reads are done, so a peer's sendbuf is
// free again after the exit step). Graph capture: fixed addresses, sequence numbers on the device, lanes
// forked and joined by events as in coll_ce.cpp.
#include <algorithm>
#include <cstring>
#include <string>

#include "collectives/coll_launch.h"
#include "collectives/coll_state.h"
#include "collectives/host_sync.h"
#include "collectives/reduce_ops.h"
#include "collectives/zc_relay.h"
#include "collectives/zc_steps.h"
#include "common/format.h"
#include "common/log.h"
#include "gpu/runtime.h"
#include "peerlink/errors.h"
#include "transport/services.h"

namespace peerlink::coll {
namespace {

enum ZcEvent { kZcFork = 0, kZcOwnDone = 1, kZcLaneJoin = 4 };  // join: 4 + l - 1 (CollState::ce_events)

struct Push {
  char* to = nullptr;  // in the peer's mapped window
  const char* from = nullptr;
  size_t bytes = 0;
  char* local = nullptr;  // set: a swap, to <-> local (the in-place all_to_all, as_swaps())
};

// What every rank must agree on: the window, the window buffer's offset in it and the call's shape
// (in place or not included: a swapping rank and a pushing one would each overwrite the other).
uint64_t call_tag(const CollDesc& d, const Window& w, size_t dst_off, bool swap) {
  uint64_t h = zc_mix(0x504c5a43ull, w.id);
  h = zc_mix(h, swap ? 1 : 0);
  h = zc_mix(h, dst_off);
  h = zc_mix(h, uint64_t(d.kind));
  h = zc_mix(h, d.count);
  h = zc_mix(h, d.elem);
  return zc_mix(h, uint64_t(d.root));
}

// Rank d.rank's pushes (one per peer with a non-empty piece), bounds-checked against the length
// each peer registered; and its own piece (from == to when nothing needs copying). Returns the
// error when a push would leave a peer's window ("" when none does).
std::string plan(const CollDesc& d, const Window& w, const char* src, char* dst, Push out[kMaxRanks], Push* own) {
  const size_t e = d.elem, dst_off = size_t(dst - w.base);
  for (int p = 0; p < d.world; ++p) {
    Piece sp = send_piece(d, p);
    if (p == d.rank) {
      Piece rp = recv_piece(d, p);
      own->from = src + sp.src_off * e;
      own->to = dst + rp.dst_off * e;
      own->bytes = rp.count * e;
      continue;
    }
    if (!sp.count) continue;
    CollDesc at = d;  // the receiver's view: where rank d.rank's piece lands in its recvbuf
    at.rank = p;
    Piece rp = recv_piece(at, d.rank);
    const size_t lo = dst_off + rp.dst_off * e, bytes = sp.count * e;
    const std::string why = w.outside(p, lo, bytes, "write");
    if (!why.empty())
      return common::format(
          "zero-copy collective (rank {}): {} (recvbuf at offset {} of window {} here); nothing was written", d.rank,
          why, dst_off, w.id);
    out[p] = Push{w.peer_base[p] + lo, src + sp.src_off * e, bytes};
  }
  return {};
}

// all_to_all in place: this rank's block p (where rank p's block lands) and rank p's block `rank`
// (where ours lands) trade places. Each such pair of blocks is split between its two ranks (the
// lower rank takes the first half, rounded down to 16 bytes; the higher one the rest), so every
// byte pair is swapped by one thread of one rank, which reads both before it writes either; the
// entry step (every rank reached the call) comes before, the exit step after. `out` is plan()'s.
void as_swaps(const CollDesc& d, char* buf, Push out[kMaxRanks]) {
  const size_t B = d.count * d.elem, half = B / 2 / 16 * 16;
  for (int p = 0; p < d.world; ++p) {
    Push& x = out[p];
    if (!x.bytes) continue;
    const size_t lo = d.rank < p ? 0 : half;
    x.local = buf + size_t(p) * B + lo;
    x.from = x.local;
    x.to += lo;
    x.bytes = d.rank < p ? half : B - half;
  }
}

// The reducing kinds pull instead: this rank reduces its piece from every rank's sendbuf, read in
// place through the window (reduce: the root only; reduce_scatter: every rank its own slice).
struct Pull {
  const char* ins[kMaxRanks] = {};
  char* out = nullptr;
  size_t count = 0;  // elements; 0 when this rank reduces nothing (a non-root of reduce)
  size_t elem = 1;   // bytes per element
};

// As plan(), for a pull: every read range is checked against the length each peer registered.
std::string plan_pull(const CollDesc& d, const Window& w, const char* src, char* dst, Pull* pl) {
  const size_t e = d.elem, src_off = size_t(src - w.base);
  const Piece rp = recv_piece(d, d.rank);
  if (!rp.count) return {};
  const size_t lo = src_off + rp.src_off * e, bytes = rp.count * e;
  for (int r = 0; r < d.world; ++r) {
    if (r == d.rank) {
      pl->ins[r] = src + rp.src_off * e;
      continue;
    }
    const std::string why = w.outside(r, lo, bytes, "read");
    if (!why.empty())
      return common::format(
          "zero-copy collective (rank {}): {} (sendbuf at offset {} of window {} here); nothing was written", d.rank,
          why, src_off, w.id);
    pl->ins[r] = w.peer_base[r] + lo;
  }
  pl->out = dst + rp.dst_off * e;
  pl->count = rp.count;
  pl->elem = e;
  return {};
}

// out = op over ins[0..n) in rank order (host backend).
void host_reduce(int dtype, int op, const Pull& pl, int n) {
  bool known_op = true;
  bool known = with_type(dtype, [&](auto t) {
    using T = decltype(t);
    const T* in[kMaxRanks] = {};  // all set below (n >= 1); GCC cannot see that (-Wmaybe-uninitialized)
    for (int r = 0; r < n; ++r) in[r] = reinterpret_cast<const T*>(pl.ins[r]);
    T* out = reinterpret_cast<T*>(pl.out);
    known_op = with_op(op, [&](auto o) { reduce_elems<T, decltype(o)::value>(in, n, &out, 1, pl.count); });
  });
  if (!known || !known_op)
    throw InvalidArgument(common::format("zero-copy collective: unknown dtype code {} or op code {}", dtype, op));
}

void host_run(CollState& st, uint64_t tag, const Push* push, const Push& own, const Pull& pull, int dtype, int op,
              const std::string& bad) {
  zc_host_enter(st, tag, bad);
  for (int p = 0; p < st.world(); ++p) {
    if (!push[p].bytes) continue;
    if (push[p].local) std::swap_ranges(push[p].local, push[p].local + push[p].bytes, push[p].to);
    else std::memcpy(push[p].to, push[p].from, push[p].bytes);
  }
  if (own.bytes && own.to != own.from) std::memmove(own.to, own.from, own.bytes);
  if (pull.count) host_reduce(dtype, op, pull, st.world());
  zc_host_step(st);  // our pushes landed, our reads of the peers' sendbufs are done
}

// The relay broadcast (zc_relay.h) on the host: the scatter, a step, the forwards, a step (the
// GPU overlaps the two by chunk flags; the host runs them one after the other, same copies).
void host_relay(CollState& st, uint64_t tag, const ZcRelayArgs& r, const std::string& bad) {
  zc_host_enter(st, tag, bad);
  if (r.is_root) {
    for (int i = 0; i < r.n; ++i) std::memcpy(r.to[i], r.from[i], r.bytes[i]);
    if (r.own_bytes) std::memcpy(r.own_to, r.own_from, r.own_bytes);
  }
  zc_host_step(st);
  if (!r.is_root)
    for (int i = 0; i < r.n; ++i) std::memcpy(r.to[i], r.from[i], r.bytes[i]);
  zc_host_step(st);
}

// Grid of the copy kernel: push blocks x threads (Options::allreduce_blocks / allreduce_threads
// override them), plus own-piece blocks. 2x H200, bf16, graph, zero-copy forced, us at 16 / 64 /
// 256 MB: all_gather 16x512 32.6/109.1/414.2, 32x512 32.4/104.4/385.4,
// 64x512 31.8/101.4/377.3, 116x512 31.8/101.5/376.7, 32x1024 32.5/104.2/398.2, 64x1024
// 32.1/103.5/382.2; all_to_all and broadcast alike (broadcast 256 MB: 796 / 740 / 737 / 735 / 737 /
// 745). Copy engines instead (Options::coll_zero_copy_ce, 1 or 2 lanes) measured 555-558 us for
// all_gather and 965-976 for broadcast at 256 MB in that setup, and 375 and 704 under nccl-tests
// (2x H200, 1 lane): the engines win from 128 MB pushes (Options::coll_zero_copy_ce_min).
constexpr int kZcPushBlocks = 64, kZcOwnBlocks = 16, kZcThreads = 512;
// Blocks of 512 threads of the pull kernel: kMaxBlocks (160), more than one per SM of an H200 (132):
// more loads in flight. 2x H200, reduce_perf -g 2 -G 100 bf16, out of place, us,
// 132 / 160 / 264 blocks: 128 MB 374.8-375.6 / 374.7-374.9 / 375.9-376.2, 256 MB 735.3-736.0 /
// 732.2-732.7 / 733.4-733.5 (NCCL's best 375.4 / 735.5). reduce_scatter 128 MB with 132 / 264:
// 215.0-215.3 / 217.1-217.2 (NCCL's best 302-306).
constexpr int kZcPullBlocks = kMaxBlocks;

// Push and own-copy blocks of one zero-copy kernel within the agreed grid cap (CollState::grid_cap):
// a fifth of it for the own copy when the usual 64 + 16 do not fit.
void fit_push_and_own(int cap, int* push, int* own) {
  if (*push + *own <= cap) return;
  *own = std::max(1, cap / 5);
  *push = std::max(1, cap - *own);
}

// The pushes go by copy engine: forced by Options::coll_zero_copy_ce, or with 2 ranks from
// coll_zero_copy_ce_min bytes (measured on 2 GPUs only). Swaps never (an engine cannot exchange).
bool pushes_by_engine(const CollState& st, const Push* push, bool swap) {
  if (swap) return false;
  const Options& o = st.svc().options();
  if (o.coll_zero_copy_ce) return true;
  if (st.world() != 2 || o.coll_zero_copy_ce_min == 0) return false;
  size_t most = 0;
  for (int p = 0; p < st.world(); ++p) most = std::max(most, push[p].bytes);
  return most >= o.coll_zero_copy_ce_min;
}

void device_run(CollState& st, uint64_t tag, const Push* push, const Push& own, const Pull& pull, bool swap, int dtype,
                int op, void* stream) {
  gpu::DeviceGuard dg(st.device());
  const LaunchArgs a = zc_step_args(st);
  const bool own_copy = own.bytes && own.to != own.from;
  gpu::Stream A = stream;
  launch_zc_step(a, tag, A);
  if (pull.count) {  // the pull kernel reads the peers' sendbufs in place (zc_kernels.cu)
    CeReduceArgs ra;
    for (int r = 0; r < st.world(); ++r) ra.ins[r] = pull.ins[r];
    ra.nin = st.world();
    ra.out = pull.out;
    ra.count = pull.count;
    ra.dtype = dtype;
    ra.op = op;
    const size_t e = pull.elem;
    ra.blocks = st.blocks_override() > 0
                    ? st.blocks_override()
                    : int(std::min<size_t>(std::min(kZcPullBlocks, st.grid_cap()), std::max<size_t>(1, pull.count * e / (512 * 16))));
    ra.per_block = round_up((pull.count + ra.blocks - 1) / ra.blocks, 16 / e);
    launch_zc_pull(ra, A);
  } else if (!pushes_by_engine(st, push, swap)) {
    // One kernel: push blocks over the link, own-piece blocks in local memory beside them. Swaps
    // always take it (a copy engine cannot exchange two ranges without a third).
    ZcCopyArgs c;
    c.swap = swap;
    for (int p = 0; p < st.world(); ++p) {
      if (!push[p].bytes) continue;
      c.from[c.n] = push[p].from;
      c.to[c.n] = push[p].to;
      c.local[c.n] = push[p].local;
      c.bytes[c.n++] = push[p].bytes;
    }
    if (own_copy) {
      c.own_from = own.from;
      c.own_to = own.to;
      c.own_bytes = own.bytes;
    }
    c.threads = st.threads() > 0 ? st.threads() : kZcThreads;
    c.push_blocks = st.blocks_override() > 0 ? st.blocks_override() : kZcPushBlocks;
    c.own_blocks = kZcOwnBlocks;
    if (st.blocks_override() <= 0) fit_push_and_own(st.grid_cap(), &c.push_blocks, &c.own_blocks);
    launch_zc_copy(c, A);
  } else {
    // Copy engines: the own piece on B, each push split over the lanes (forked from A, joined back).
    const int lanes = std::max(1, st.ce_lanes());
    gpu::Stream B = st.ce_stream(0);
    auto ev = [&](int i) { return st.ce_event(i); };
    auto lane = [&](int l) { return l == 0 ? A : st.ce_stream(l); };
    gpu::event_record(ev(kZcFork), A);
    if (own_copy) {
      gpu::stream_wait_event(B, ev(kZcFork));
      gpu::memcpy_async(own.to, own.from, own.bytes, B);
      gpu::event_record(ev(kZcOwnDone), B);
    }
    for (int l = 1; l < lanes; ++l) gpu::stream_wait_event(st.ce_stream(l), ev(kZcFork));
    for (int p = 0; p < st.world(); ++p) {  // 16-byte multiples per lane
      const Push& x = push[p];
      if (!x.bytes) continue;
      const size_t part = round_up((x.bytes + lanes - 1) / lanes, 16);
      for (int l = 0; l < lanes; ++l) {
        const size_t off = size_t(l) * part;
        if (off >= x.bytes) break;
        gpu::memcpy_async(x.to + off, x.from + off, std::min(part, x.bytes - off), lane(l));
      }
    }
    for (int l = 1; l < lanes; ++l) {
      gpu::event_record(ev(kZcLaneJoin + l - 1), st.ce_stream(l));
      gpu::stream_wait_event(A, ev(kZcLaneJoin + l - 1));
    }
    if (own_copy) gpu::stream_wait_event(A, ev(kZcOwnDone));
  }
  launch_ce_step(a, false, A);
}

// The relay broadcast on the GPU: entry step | relay kernel (zc_kernels.cu) | exit step.
constexpr int kRelayPushBlocks = 64;
void device_relay(CollState& st, uint64_t tag, ZcRelayArgs r, void* stream) {
  gpu::DeviceGuard dg(st.device());
  const LaunchArgs a = zc_step_args(st);
  launch_zc_step(a, tag, stream);
  r.threads = st.threads() > 0 ? st.threads() : kZcThreads;
  r.push_blocks = st.blocks_override() > 0 ? std::min(st.blocks_override(), kMaxBlocks - kZcOwnBlocks) : kRelayPushBlocks;
  r.own_blocks = kZcOwnBlocks;
  if (st.blocks_override() <= 0) fit_push_and_own(st.grid_cap(), &r.push_blocks, &r.own_blocks);
  launch_zc_relay(a, r, stream);
  launch_ce_step(a, false, stream);
}

}  // namespace

void zc_collective(CollState& st, const CollDesc& d, int dtype, int op, const Window& w, const void* src, void* dst,
                   void* stream) {
  if (d.kind == kAllToAllV)
    throw InvalidArgument("zero-copy collective: all_to_all_v has none (its pieces differ per rank)");
  if (!w.zero_copy)
    throw InvalidArgument(common::format("zero-copy collective: window {} is not mapped on every rank", w.id));
  Push push[kMaxRanks];
  Push own;
  Pull pull;
  const char* s = static_cast<const char*>(src);
  char* t = static_cast<char*>(dst);
  const bool red = reducing(d.kind), swap = d.kind == kAllToAll && s == t;
  if (relay_kind(d)) {
    ZcRelayArgs r;
    const std::string bad = relay_plan(d, w, s, t, &r);
    const uint64_t tag = call_tag(d, w, size_t(t - w.base), false);
    if (st.host()) return host_relay(st, tag, r, bad);
    if (!bad.empty()) return zc_refuse(st, tag, bad, stream);
    return device_relay(st, tag, r, stream);
  }
  const std::string bad = red ? plan_pull(d, w, s, t, &pull) : plan(d, w, s, t, push, &own);
  if (swap && bad.empty()) as_swaps(d, t, push);
  // The window holds recvbuf (moving kinds) or sendbuf (reducing kinds): its offset is in the tag.
  const uint64_t tag = call_tag(d, w, size_t((red ? s : t) - w.base), swap) ^ uint64_t(op);
  if (st.host()) return host_run(st, tag, push, own, pull, dtype, op, bad);
  if (!bad.empty()) return zc_refuse(st, tag, bad, stream);
  device_run(st, tag, push, own, pull, swap, dtype, op, stream);
}

}  // namespace peerlink::coll
