// Host backend allreduce: the device algorithms (one-shot, two-shot, multi-step chunks, flag
// protocol of layout.h) run by one CPU thread per rank over POSIX SHM, so CI exercises the same
// sequence numbers, slot reuse and chunking across real processes. One "block" (index 0).
#include <algorithm>

#include "collectives/host_sync.h"
#include "common/format.h"

namespace peerlink::coll {
namespace {

void signal(CollState& st, int phase, uint64_t seq) { host_signal(st, phase, seq); }
void wait_all(CollState& st, int phase, uint64_t seq) { host_wait_all(st, phase, seq, "allreduce"); }

template <typename T, int Op>
void run(CollState& st, const T* src_all, T* dst_all, size_t count, bool one_shot) {
  const DataLayout& L = st.layout();
  const int me = st.rank(), n = st.world();
  Split s = make_split(count, sizeof(T), n, L.cap, one_shot, 1);
  const T* ins[kMaxRanks];
  T* outs[kMaxRanks];
  for (size_t step = 0; step < s.steps; ++step) {
    const uint64_t seq = st.next_host_step();
    const int slot = int(seq & 1);
    const size_t e0 = step * s.step_elems;
    const size_t len = std::min(s.step_elems, count - e0);
    const T* src = src_all + e0;
    T* dst = dst_all + e0;
    auto scratch = [&](int rank, size_t off) { return reinterpret_cast<T*>(st.data(rank) + off); };
    if (one_shot) {
      int no = 0;
      for (int p = 0; p < n; ++p)
        if (p != me) outs[no++] = scratch(p, L.input(slot, me));
      ins[0] = src;
      reduce_elems<T, Op>(ins, 1, outs, no, len);
      signal(st, 0, seq);
      wait_all(st, 0, seq);
      for (int r = 0; r < n; ++r) ins[r] = r == me ? src : scratch(me, L.input(slot, r));
      outs[0] = dst;
      reduce_elems<T, Op>(ins, n, outs, 1, len);
      continue;
    }
    auto shard = [&](int q, size_t* lo, size_t* m) {
      *lo = std::min(size_t(q) * s.shard, len);
      *m = std::min(*lo + s.shard, len) - *lo;
    };
    size_t lo, m;
    for (int p = 0; p < n; ++p) {  // reduce-scatter: our copy of shard p goes to its owner
      if (p == me) continue;
      shard(p, &lo, &m);
      ins[0] = src + lo;
      outs[0] = scratch(p, L.input(slot, me));
      reduce_elems<T, Op>(ins, 1, outs, 1, m);
    }
    signal(st, 0, seq);
    wait_all(st, 0, seq);
    shard(me, &lo, &m);
    for (int r = 0; r < n; ++r) ins[r] = r == me ? src + lo : scratch(me, L.input(slot, r));
    int no = 0;
    outs[no++] = dst + lo;
    for (int p = 0; p < n; ++p)
      if (p != me) outs[no++] = scratch(p, L.result(slot, me));
    reduce_elems<T, Op>(ins, n, outs, no, m);
    signal(st, 1, seq);
    wait_all(st, 1, seq);
    for (int p = 0; p < n; ++p) {  // all-gather: shard p arrived in our result region
      if (p == me) continue;
      shard(p, &lo, &m);
      ins[0] = scratch(me, L.result(slot, p));
      outs[0] = dst + lo;
      reduce_elems<T, Op>(ins, 1, outs, 1, m);
    }
  }
}

template <typename T>
void run_op(CollState& st, const void* src, void* dst, size_t count, int op, bool one_shot) {
  auto s = static_cast<const T*>(src);
  auto d = static_cast<T*>(dst);
  switch (op) {
    case kOpSum: return run<T, kOpSum>(st, s, d, count, one_shot);
    case kOpMax: return run<T, kOpMax>(st, s, d, count, one_shot);
    case kOpMin: return run<T, kOpMin>(st, s, d, count, one_shot);
    case kOpProd: return run<T, kOpProd>(st, s, d, count, one_shot);
    case kOpAvg: return run<T, kOpAvg>(st, s, d, count, one_shot);
  }
  throw InvalidArgument(common::format("allreduce: unknown reduce op code {}", op));
}

}  // namespace

void host_allreduce(CollState& st, const void* src, void* dst, size_t count, int dtype, int op, bool one_shot) {
  bool known = with_type(dtype, [&](auto t) { run_op<decltype(t)>(st, src, dst, count, op, one_shot); });
  if (!known) throw InvalidArgument(common::format("allreduce: unknown dtype code {}", dtype));
}

}  // namespace peerlink::coll
