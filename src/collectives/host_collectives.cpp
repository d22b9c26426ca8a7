// Host backend of all-gather, reduce-scatter, broadcast, reduce and all-to-all(v): the plan of
// coll_plan.h run by one CPU thread per rank over POSIX SHM (one "block"), the chunked push path,
// the LL path and the LL128 path, so that CI runs the sequence numbers, slot reuse, chunking, tokens and the
// all_to_all_v step agreement of the GPU kernels across real processes.
#include <algorithm>
#include <vector>

#include "collectives/coll_launch.h"
#include "collectives/host_sync.h"
#include "common/format.h"

namespace peerlink::coll {
namespace {

// The device split emulated on the host: the grid push_grid() would give a GPU with 4 SMs and
// 32-thread blocks, so pieces from 2 KB up use several "blocks" in CI.
constexpr int kHostBlocks = 4;
constexpr int kHostThreads = 32;

const char* kind_name(int kind) {
  switch (kind) {
    case kAllGather: return "all_gather";
    case kReduceScatter: return "reduce_scatter";
    case kBroadcast: return "broadcast";
    case kReduce: return "reduce";
    case kAllToAll: return "all_to_all";
    case kAllToAllV: return "all_to_all_v";
  }
  return "collective";
}

// all_to_all_v: ranks know only their own counts, so the number of steps is agreed first: one
// step in which every rank pushes its largest piece (8 bytes) and takes the maximum of all.
size_t agree_max(CollState& st, size_t mine, const char* what) {
  const uint64_t seq = st.next_host_step();
  const int slot = int(seq & 1);
  for (int p = 0; p < st.world(); ++p)
    if (p != st.rank()) std::memcpy(st.data(p) + st.layout().input(slot, st.rank()), &mine, sizeof mine);
  host_signal(st, 0, seq);
  host_wait_all(st, 0, seq, what);
  size_t m = mine;
  for (int r = 0; r < st.world(); ++r) {
    if (r == st.rank()) continue;
    size_t x;
    std::memcpy(&x, st.data(st.rank()) + st.layout().input(slot, r), sizeof x);
    m = std::max(m, x);
  }
  return m;
}

template <typename T, int Op>
void run_push(CollState& st, const CollDesc& d, const T* src, T* dst) {
  const DataLayout& L = st.layout();
  const int me = st.rank(), n = st.world();
  const char* what = kind_name(d.kind);
  const PushGrid g = push_grid(d, L.cap, kHostThreads, kHostBlocks, 0);
  const size_t C = g.chunk, pb = g.per_block;
  const size_t steps = d.kind == kAllToAllV ? (agree_max(st, local_max_piece(d), what) + C - 1) / C : g.steps;
  const T* ins[kMaxRanks];
  for (size_t step = 0; step < steps; ++step) {
    const uint64_t seq = st.next_host_step();
    const int slot = int(seq & 1);
    auto scratch = [&](int from, size_t rel) { return reinterpret_cast<T*>(st.data(me) + L.input(slot, from)) + rel; };
    size_t lo = 0, m;
    for (int b = 0; b < g.blocks; ++b) {  // the device's blocks, one after the other
      const size_t rel = size_t(b) * pb;
      for (int p = 0; p < n; ++p) {  // push chunk `step` of every outgoing piece
        if (p == me) continue;
        Piece sp = send_piece(d, p);
        if ((m = sub_range(sp.count, step, C, rel, pb, &lo)))
          std::memcpy(reinterpret_cast<T*>(st.data(p) + L.input(slot, me)) + rel, src + sp.src_off + lo, m * sizeof(T));
      }
    }
    host_signal(st, 0, seq);
    host_wait_all(st, 0, seq, what);
    for (int b = 0; b < g.blocks; ++b) {
      const size_t rel = size_t(b) * pb;
      if (reducing(d.kind)) {
        Piece rp = recv_piece(d, me);
        if ((m = sub_range(rp.count, step, C, rel, pb, &lo))) {
          for (int r = 0; r < n; ++r) ins[r] = r == me ? src + rp.src_off + lo : scratch(r, rel);
          T* out = dst + rp.dst_off + lo;
          reduce_elems<T, Op>(ins, n, &out, 1, m);
        }
        continue;
      }
      for (int r = 0; r < n; ++r) {
        Piece rp = recv_piece(d, r);
        if (!(m = sub_range(rp.count, step, C, rel, pb, &lo))) continue;
        const T* in = r == me ? src + send_piece(d, me).src_off + lo : scratch(r, rel);
        T* out = dst + rp.dst_off + lo;
        reduce_elems<T, kOpSum>(&in, 1, &out, 1, m);  // a move
      }
    }
  }
}

// The two-hop plan of broadcast and reduce (coll_plan.h), the kernel's steps (coll_two_hop.h) with
// its blocks one after the other.
template <typename T, int Op>
void run_two_hop(CollState& st, const CollDesc& d, const T* src, T* dst) {
  const DataLayout& L = st.layout();
  const int me = st.rank(), n = st.world(), root = d.root;
  const PushGrid g = push_grid(d, L.cap, kHostThreads, kHostBlocks, 0, true);
  const size_t C = g.chunk, pb = g.per_block, shard = two_hop_shard(d);
  const bool reduce = d.kind == kReduce;
  const int mine = me == root ? -1 : owned_shard(d, me);
  for (size_t step = 0; step < g.steps; ++step) {
    const uint64_t seq = st.next_host_step();
    const int slot = int(seq & 1), prev = slot ^ 1;
    auto at = [&](int r, int s, int pos, size_t rel) { return reinterpret_cast<T*>(st.data(r) + L.input(s, pos)) + rel; };
    // Chunk `chunk` of shard i as block `rel` covers it: *lo (an element of the buffer) and the count.
    auto part = [&](int i, size_t chunk, size_t rel, size_t* lo) {
      size_t off, m = sub_range(shard_range(d, i, shard, &off), chunk, C, rel, pb, lo);
      *lo += off;
      return m;
    };
    size_t lo = 0, m;
    for (int b = 0; b < g.blocks; ++b) {
      const size_t rel = size_t(b) * pb;
      for (int i = 0; i < n - 1 && (reduce || me == root); ++i) {  // first hop: chunk `step` to the owners
        const int o = owner_rank(d, i);
        if (o != me && (m = part(i, step, rel, &lo))) std::memcpy(at(o, slot, me, rel), src + lo, m * sizeof(T));
      }
      if (mine < 0 || step == 0 || !(m = part(mine, step - 1, rel, &lo))) continue;
      // Second hop: chunk step - 1 of the owner's shard, out of its previous slot.
      if (reduce) {
        const T* ins[kMaxRanks];
        for (int r = 0; r < n; ++r) ins[r] = r == me ? src + lo : at(me, prev, r, rel);
        T* out = at(root, slot, me, rel);
        reduce_elems<T, Op>(ins, n, &out, 1, m);
      } else {
        const T* in = at(me, prev, root, rel);
        T* outs[kMaxRanks];
        int no = 0;
        outs[no++] = dst + lo;
        for (int q = 0; q < n; ++q)
          if (q != me && q != root) outs[no++] = at(q, slot, me, rel);
        reduce_elems<T, kOpSum>(&in, 1, outs, no, m);  // copies
      }
    }
    host_signal(st, 0, seq);
    host_wait_all(st, 0, seq, kind_name(d.kind));
    for (int b = 0; b < g.blocks; ++b) {
      const size_t rel = size_t(b) * pb;
      for (int i = 0; i < n - 1; ++i) {
        const int o = owner_rank(d, i);
        if (o == me) continue;
        // The second hop arrived: chunk step - 1 of shard i (reduce: at the root; broadcast: elsewhere).
        if (step > 0 && reduce == (me == root) && (m = part(i, step - 1, rel, &lo)))
          std::memcpy(dst + lo, at(me, slot, o, rel), m * sizeof(T));
        if (!reduce && me == root && src != dst && (m = part(i, step, rel, &lo)))  // the root's own copy
          std::memcpy(dst + lo, src + lo, m * sizeof(T));
      }
    }
  }
}

// ---- LL lines on SHM: each 8-byte half {data 4 B, flag 4 B} is one atomic store, as on the GPU.
inline void put_line(char* line, uint64_t v, uint32_t flag) {
  auto h = reinterpret_cast<uint64_t*>(line);
  __atomic_store_n(&h[0], (v & 0xffffffffu) | (uint64_t(flag) << 32), __ATOMIC_RELEASE);
  __atomic_store_n(&h[1], (v >> 32) | (uint64_t(flag) << 32), __ATOMIC_RELEASE);
}
inline bool get_line(const char* line, uint32_t flag, uint64_t* v) {
  auto h = reinterpret_cast<const uint64_t*>(line);
  uint64_t a = __atomic_load_n(&h[0], __ATOMIC_ACQUIRE), b = __atomic_load_n(&h[1], __ATOMIC_ACQUIRE);
  if (uint32_t(a >> 32) != flag || uint32_t(b >> 32) != flag) return false;
  *v = (a & 0xffffffffu) | (b << 32);
  return true;
}

uint64_t wait_line(CollState& st, int from, const char* line, uint32_t flag, size_t w, const char* what) {
  uint64_t v = 0;
  host_wait(
      st, from, what, [&] { return get_line(line, flag, &v); },
      [&] { return common::format("LL line {}, flag {}", w, flag); });
  return v;
}

// The reducing kinds' one-step receive (LL, LL128): every peer's piece copied out of its lines by
// take(rank, bytes, out) into a temporary, then reduced with ours in rank order.
template <typename T, int Op, typename Take>
void reduce_taken(CollState& st, const CollDesc& d, const T* src, T* dst, Take&& take) {
  const Piece rp = recv_piece(d, st.rank());
  std::vector<std::vector<T>> tmp(st.world());
  const T* ins[kMaxRanks];
  for (int r = 0; r < st.world(); ++r) {
    if (r == st.rank()) {
      ins[r] = src + rp.src_off;
      continue;
    }
    tmp[r].resize(rp.count);
    take(r, rp.count * sizeof(T), reinterpret_cast<char*>(tmp[r].data()));
    ins[r] = tmp[r].data();
  }
  T* out = dst + rp.dst_off;
  if (rp.count) reduce_elems<T, Op>(ins, st.world(), &out, 1, rp.count);
}

template <typename T, int Op>
void run_ll(CollState& st, const CollDesc& d, const T* src, T* dst) {
  const DataLayout& L = st.layout();
  const int me = st.rank(), n = st.world();
  const char* what = kind_name(d.kind);
  const uint64_t seq = st.next_host_step();
  const int slot = int(seq & 1);
  const uint32_t flag = uint32_t(seq);
  for (int p = 0; p < n; ++p) {  // push every outgoing piece as lines (a token line when empty)
    if (p == me) continue;
    Piece sp = send_piece(d, p);
    char* lines = st.data(p) + L.ll(slot, me);
    const size_t bytes = sp.count * sizeof(T);
    const char* s = reinterpret_cast<const char*>(src + sp.src_off);
    if (bytes == 0) put_line(lines, 0, flag);
    for (size_t w = 0; w * 8 < bytes; ++w) {
      uint64_t v = 0;
      std::memcpy(&v, s + w * 8, std::min<size_t>(8, bytes - w * 8));
      put_line(lines + w * 16, v, flag);
    }
  }
  // Receive: every line of every incoming piece (a token when empty) into `out` (or discarded).
  auto take = [&](int r, size_t bytes, char* out) {
    const char* lines = st.data(me) + L.ll(slot, r);
    if (bytes == 0) wait_line(st, r, lines, flag, 0, what);
    for (size_t w = 0; w * 8 < bytes; ++w) {
      uint64_t v = wait_line(st, r, lines + w * 16, flag, w, what);
      std::memcpy(out + w * 8, &v, std::min<size_t>(8, bytes - w * 8));
    }
  };
  if (reducing(d.kind)) return reduce_taken<T, Op>(st, d, src, dst, take);
  for (int r = 0; r < n; ++r) {
    Piece rp = recv_piece(d, r);
    T* out = dst + rp.dst_off;
    if (r != me) {
      take(r, rp.count * sizeof(T), reinterpret_cast<char*>(out));
    } else if (rp.count) {
      const T* in = src + send_piece(d, me).src_off;
      reduce_elems<T, kOpSum>(&in, 1, &out, 1, rp.count);
    }
  }
}

// ---- LL128 lines on SHM: the GPU's line layout (layout.h: 15 data words, the flag in the last 8
// bytes); the host writes the data words first and the flag last with a release store, and the
// reader acquires the flag before it reads the words (a CPU gives no 128-byte store atomicity).
constexpr size_t kLineWords = kLl128Data / 8;

void put_line128(char* line, const char* data, size_t bytes, uint64_t flag) {
  uint64_t w[kLineWords] = {};
  if (bytes) std::memcpy(w, data, std::min(bytes, kLl128Data));
  auto h = reinterpret_cast<uint64_t*>(line);
  for (size_t k = 0; k < kLineWords; ++k) __atomic_store_n(&h[k], w[k], __ATOMIC_RELAXED);
  __atomic_store_n(&h[kLineWords], flag, __ATOMIC_RELEASE);
}

// Waits for line l of rank `from`'s area position, then copies its first `bytes` data bytes to out.
void take_line128(CollState& st, int from, const char* line, size_t l, uint64_t flag, char* out, size_t bytes,
                  const char* what) {
  auto h = reinterpret_cast<const uint64_t*>(line);
  host_wait(
      st, from, what, [&] { return __atomic_load_n(&h[kLineWords], __ATOMIC_ACQUIRE) == flag; },
      [&] { return common::format("LL128 line {}, flag {}", l, flag); });
  uint64_t w[kLineWords];
  for (size_t k = 0; k < kLineWords; ++k) w[k] = __atomic_load_n(&h[k], __ATOMIC_RELAXED);
  if (bytes) std::memcpy(out, w, std::min(bytes, kLl128Data));
}

template <typename T, int Op>
void run_ll128(CollState& st, const CollDesc& d, const T* src, T* dst) {
  const DataLayout& L = st.layout();
  const int me = st.rank(), n = st.world();
  const char* what = kind_name(d.kind);
  const uint64_t seq = st.next_host_step();
  const int slot = int(seq & 1);
  for (int p = 0; p < n; ++p) {  // push every outgoing piece as lines (a flag-only token when empty)
    if (p == me) continue;
    const Piece sp = send_piece(d, p);
    char* area = st.data(p) + L.ll128(slot, me);
    const size_t bytes = sp.count * sizeof(T);
    const char* s = reinterpret_cast<const char*>(src + sp.src_off);
    if (bytes == 0) put_line128(area, nullptr, 0, seq);
    for (size_t l = 0; l < ll128_lines(bytes); ++l)
      put_line128(area + l * kLl128Line, s + l * kLl128Data, bytes - l * kLl128Data, seq);
  }
  // Every line of the piece from r (its token when empty) into `out`.
  auto take = [&](int r, size_t bytes, char* out) {
    const char* area = st.data(me) + L.ll128(slot, r);
    if (bytes == 0) take_line128(st, r, area, 0, seq, nullptr, 0, what);
    for (size_t l = 0; l < ll128_lines(bytes); ++l)
      take_line128(st, r, area + l * kLl128Line, l, seq, out + l * kLl128Data, bytes - l * kLl128Data, what);
  };
  if (reducing(d.kind)) return reduce_taken<T, Op>(st, d, src, dst, take);
  for (int r = 0; r < n; ++r) {
    const MoveTarget t = move_target(d, r, d.kind, reinterpret_cast<const char*>(src), reinterpret_cast<char*>(dst));
    if (t.token) take(r, 0, nullptr);
    if (t.token || t.skip) continue;
    if (t.in) std::memmove(t.out, t.in, t.bytes);
    else take(r, t.bytes, t.out);
  }
}

template <typename T>
void run_typed(CollState& st, const CollDesc& d, int op, const void* src, void* dst, CollAlgo algo) {
  auto s = static_cast<const T*>(src);
  auto t = static_cast<T*>(dst);
  auto go = [&](auto opc) {
    constexpr int Op = decltype(opc)::value;
    if (algo == CollAlgo::LL) run_ll<T, Op>(st, d, s, t);
    else if (algo == CollAlgo::LL128) run_ll128<T, Op>(st, d, s, t);
    else if (algo == CollAlgo::TwoHop) run_two_hop<T, Op>(st, d, s, t);
    else run_push<T, Op>(st, d, s, t);
  };
  if (!reducing(d.kind)) return go(std::integral_constant<int, kOpSum>{});
  switch (op) {
    case kOpSum: return go(std::integral_constant<int, kOpSum>{});
    case kOpMax: return go(std::integral_constant<int, kOpMax>{});
    case kOpMin: return go(std::integral_constant<int, kOpMin>{});
    case kOpProd: return go(std::integral_constant<int, kOpProd>{});
    case kOpAvg: return go(std::integral_constant<int, kOpAvg>{});
  }
  throw InvalidArgument(common::format("{}: unknown reduce op code {}", kind_name(d.kind), op));
}

}  // namespace

void host_collective(CollState& st, const CollDesc& d, int dtype, int op, const void* src, void* dst, CollAlgo algo) {
  bool known = with_type(dtype, [&](auto t) { run_typed<decltype(t)>(st, d, op, src, dst, algo); });
  if (!known) throw InvalidArgument(common::format("{}: unknown dtype code {}", kind_name(d.kind), dtype));
}

}  // namespace peerlink::coll
