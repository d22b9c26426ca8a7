// Zero-copy allreduce (AllreduceAlgo::ZeroCopy): sendbuf and recvbuf each lie in a registered
// window (peerlink/windows.h; or a graph window, graph_windows.h) at the same offsets on every rank.
// Rank p owns shard p of the buffer: it reads shard p of every rank's sendbuf in place over the link,
// reduces it in rank order, and stores the result into shard p of its own recvbuf and of every
// peer's recvbuf. One kernel between the entry and exit steps of the other zero-copy paths
// (zc_steps.h), and no flag inside it: no rank waits for another between the two steps.
//
// Why: the staged bandwidth kernel (allreduce_kernels.cu) crosses the link as often, but also
// copies through the scratch on both sides and waits for the peers twice per chunk. Here the reads
// of shard p (one link direction) overlap the stores of shard p (the other), and nothing is copied
// twice. It pays with 4 ranks at 16-64 MB (allreduce.cpp, zero_copy_auto, with the numbers); with 2
// or 3 ranks the bandwidth kernel stays ahead.
//
// In place (sendbuf == recvbuf) is safe: shard p of every rank's buffer is read and written by rank
// p alone, each element read (every rank's copy of it) before it is written. The entry step orders
// the stores after every peer's stream reached the call; the exit step after the last store landed
// and the last read of a peer's sendbuf returned, so both buffers are the caller's again on return.
#include <algorithm>
#include <string>

#include "collectives/coll_launch.h"
#include "collectives/coll_state.h"
#include "collectives/host_sync.h"
#include "collectives/reduce_ops.h"
#include "collectives/zc_steps.h"
#include "common/format.h"
#include "common/log.h"
#include "gpu/runtime.h"
#include "peerlink/errors.h"

namespace peerlink::coll {
namespace {

struct Shard {
  const char* ins[kMaxRanks] = {};  // shard p of every rank's sendbuf (own: local)
  char* outs[kMaxRanks] = {};       // shard p of every rank's recvbuf, own first
  int nout = 0;
  size_t count = 0;  // elements of this rank's shard (0: nothing to reduce, a small call)
};

// Elements per shard: a whole 16-byte vector each, so every shard starts aligned where the buffer is.
size_t shard_elems(size_t count, size_t elem, int world) {
  const size_t vec = elem < 16 ? 16 / elem : 1;
  return round_up((count + size_t(world) - 1) / size_t(world), vec);
}

uint64_t call_tag(const Window& ws, size_t src_off, const Window& wr, size_t dst_off, size_t count, size_t elem,
                  int op) {
  uint64_t h = zc_mix(0x504c5a41ull, ws.id);  // "PLZA"
  h = zc_mix(h, src_off);
  h = zc_mix(h, wr.id);
  h = zc_mix(h, dst_off);
  h = zc_mix(h, count);
  h = zc_mix(h, elem);
  return zc_mix(h, uint64_t(op));
}

// This rank's shard, every peer range checked against what that peer registered ("" when all are
// inside; else why not, and nothing may move).
std::string plan(const CollState& st, const Window& ws, const Window& wr, const char* src, char* dst, size_t count,
                 size_t elem, Shard* sh) {
  const size_t per = shard_elems(count, elem, st.world());
  const size_t lo = std::min(count, per * size_t(st.rank())), hi = std::min(count, lo + per);
  sh->count = hi - lo;
  if (!sh->count) return {};
  const size_t src_off = size_t(src - ws.base) + lo * elem, dst_off = size_t(dst - wr.base) + lo * elem;
  const size_t bytes = sh->count * elem;
  sh->outs[sh->nout++] = dst + lo * elem;
  for (int r = 0; r < st.world(); ++r) {
    if (r == st.rank()) {
      sh->ins[r] = src + lo * elem;
      continue;
    }
    std::string why = ws.outside(r, src_off, bytes, "read");
    if (why.empty()) why = wr.outside(r, dst_off, bytes, "write");
    if (!why.empty())
      return common::format(
          "zero-copy allreduce (rank {}): {} (sendbuf at offset {} of window {}, recvbuf at offset {} of window {} "
          "here); nothing was written",
          st.rank(), why, size_t(src - ws.base), ws.id, size_t(dst - wr.base), wr.id);
    sh->ins[r] = ws.peer_base[r] + src_off;
    sh->outs[sh->nout++] = wr.peer_base[r] + dst_off;
  }
  return {};
}

void host_run(CollState& st, uint64_t tag, const Shard& sh, int dtype, int op, const std::string& bad) {
  zc_host_enter(st, tag, bad);
  if (sh.count) {
    bool known_op = true;
    const bool known = with_type(dtype, [&](auto t) {
      using T = decltype(t);
      const T* in[kMaxRanks];
      T* out[kMaxRanks];
      for (int r = 0; r < st.world(); ++r) in[r] = reinterpret_cast<const T*>(sh.ins[r]);
      for (int o = 0; o < sh.nout; ++o) out[o] = reinterpret_cast<T*>(sh.outs[o]);
      known_op = with_op(op, [&](auto o) { reduce_elems<T, decltype(o)::value>(in, st.world(), out, sh.nout, sh.count); });
    });
    if (!known || !known_op)
      throw InvalidArgument(common::format("zero-copy allreduce: unknown dtype code {} or op code {}", dtype, op));
  }
  zc_host_step(st);  // our stores landed, our reads of the peers' sendbufs are done
}

// Blocks of 512 threads, one 16-byte vector per thread at least. 64, not the 160 of reduce's pull
// (coll_zero_copy.cpp): all_reduce_perf -G 100 bf16, us, 160 / 132 / 64 blocks:
// 4x H200 16 MB 257.5 / 128.9 / 106.0, 64 MB 375.9 / 378.2 / 354.3, 256 MB 1378 / 1301 / 1322;
// 2x H200 16 MB 110.6 / - / 62.6. More blocks keep more reads and stores in flight at once, and
// the link serves them worse.
constexpr int kZcAllreduceBlocks = 64;
void device_run(CollState& st, uint64_t tag, const Shard& sh, size_t elem, int dtype, int op, void* stream) {
  gpu::DeviceGuard dg(st.device());
  const LaunchArgs a = zc_step_args(st);
  launch_zc_step(a, tag, stream);
  if (sh.count) {
    CeReduceArgs ra;
    for (int r = 0; r < st.world(); ++r) ra.ins[r] = sh.ins[r];
    ra.nin = st.world();
    ra.out = sh.outs[0];
    for (int o = 1; o < sh.nout; ++o) ra.extra_outs[ra.nextra++] = sh.outs[o];
    ra.count = sh.count;
    ra.dtype = dtype;
    ra.op = op;
    ra.blocks = st.blocks_override() > 0
                    ? st.blocks_override()
                    : int(std::min<size_t>(std::min(kZcAllreduceBlocks, st.grid_cap()), std::max<size_t>(1, sh.count * elem / (512 * 16))));
    ra.per_block = round_up((sh.count + ra.blocks - 1) / ra.blocks, elem < 16 ? 16 / elem : 1);
    launch_zc_pull(ra, stream);
  }
  launch_ce_step(a, false, stream);
}

}  // namespace

void zc_allreduce(CollState& st, const Window& ws, const Window& wr, const void* src, void* dst, size_t count,
                  size_t elem, int dtype, int op, void* stream) {
  if (!ws.zero_copy || !wr.zero_copy)
    throw InvalidArgument(
        common::format("zero-copy allreduce: window {} is not mapped on every rank", ws.zero_copy ? wr.id : ws.id));
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  Shard sh;
  const std::string bad = plan(st, ws, wr, s, d, count, elem, &sh);
  const uint64_t tag = call_tag(ws, size_t(s - ws.base), wr, size_t(d - wr.base), count, elem, op);
  if (st.host()) return host_run(st, tag, sh, dtype, op, bad);
  if (!bad.empty()) zc_refuse(st, tag, bad, stream);
  device_run(st, tag, sh, elem, dtype, op, stream);
}

}  // namespace peerlink::coll
