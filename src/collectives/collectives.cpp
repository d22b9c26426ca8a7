// all_gather, reduce_scatter, broadcast, reduce, all_to_all(v): argument checks (nothing is written
// before they pass), dispatch to the one-rank copy, the host plan or the device kernels along the
// path coll_choice.cpp chooses. The data flow is in coll_plan.h; the registered scratch, flags and
// counters are allreduce's (coll_state.h).
#include "peerlink/collectives.h"

#include <algorithm>
#include <chrono>

#include "collectives/coll_choice.h"
#include "collectives/coll_launch.h"
#include "collectives/coll_state.h"
#include "collectives/one_rank.h"
#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "transport/services.h"

namespace peerlink {
namespace {

using Call = coll::CollCall;

size_t mul_checked(const char* name, size_t a, size_t b, const char* what) {
  if (b != 0 && a > SIZE_MAX / b) throw InvalidArgument(common::format("{}: {} {} x {} overflows", name, what, a, b));
  return a * b;
}

// [a, a+an) and [b, b+bn) share a byte.
bool overlap(const void* a, size_t an, const void* b, size_t bn) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an && bn && x < y + bn && y < x + an;
}

// Input and output either coincide at `in_place_at` (allowed in-place layout) or do not overlap.
void check_overlap(const char* name, const void* s, size_t sb, const void* d, size_t db, const void* in_place_at) {
  if (!overlap(s, sb, d, db)) return;
  if (in_place_at && s == in_place_at) return;
  throw InvalidArgument(common::format(
      "{}: sendbuf {} ({} bytes) and recvbuf {} ({} bytes) overlap{}", name, s, sb, d, db,
      in_place_at ? common::format("; in place means sendbuf == {}", in_place_at) : std::string(" (not allowed)")));
}

void check_null(const char* name, const void* p, size_t bytes, const char* which) {
  if (bytes && !p) throw InvalidArgument(common::format("{}: {} is null for {} bytes", name, which, bytes));
}

void check_op(const char* name, ReduceOp op) {
  if (static_cast<unsigned>(op) > static_cast<unsigned>(ReduceOp::Avg))
    throw InvalidArgument(common::format("{}: unknown ReduceOp {}", name, static_cast<int>(op)));
}

int world_of(Communicator& comm) { return comm.world_size(); }

void check_root(const char* name, int root, int world) {
  if (root < 0 || root >= world)
    throw InvalidArgument(common::format("{}: root {} is not a rank of 0..{}", name, root, world - 1));
}

int clamp_int(size_t want, int lo, int hi) { return static_cast<int>(std::max<size_t>(lo, std::min<size_t>(want, hi))); }

void device_run(coll::CollState& st, const Call& c, CollAlgo algo, const coll::Window* w, void* stream) {
  coll::CollLaunchArgs L;
  coll::LaunchArgs& a = L.a;
  a.src = c.src;
  a.dst = c.dst;
  a.dtype = static_cast<int>(c.dtype);
  a.op = static_cast<int>(c.op);
  coll::fill_state_args(st, a);
  a.pdl = st.pdl();
  a.threads = st.threads() > 0 ? st.threads() : 512;
  const int all = coll::whole_gpu_blocks(st);
  L.d = c.d;
  const size_t elem = c.d.elem;
  if (algo == CollAlgo::LL) {
    // The LL grid need not agree across ranks (every line carries its own flag; layout.h).
    L.ll = true;
    const size_t piece_bytes = coll::local_max_piece(c.d) * elem;
    if (st.threads() <= 0) a.threads = coll::ll_threads(piece_bytes);
    size_t words = (piece_bytes + 7) / 8;
    a.blocks = st.blocks_override() > 0 ? st.blocks_override() : clamp_int((words + a.threads - 1) / a.threads, 1, all);
    L.ll_words_per_block = std::max<size_t>(1, (words + a.blocks - 1) / a.blocks);
  } else if (algo == CollAlgo::LL128) {
    // As allreduce's LL128 grid (allreduce.cpp): whole warps, enough for one warp store of the
    // largest piece per warp, up to kMaxBlocks.
    L.ll128 = true;
    const size_t lines = coll::ll128_lines(coll::local_max_piece(c.d) * elem);
    a.threads = std::max(64, a.threads / 64 * 64);
    const size_t warps = size_t(a.threads) / 32, stores = (lines + 3) / 4;
    a.blocks = st.blocks_override() > 0 ? st.blocks_override() : clamp_int((stores + warps - 1) / warps, 1, st.grid_cap());
  } else {
    L.two_hop = algo == CollAlgo::TwoHop;
    coll::PushGrid g = coll::push_grid(c.d, st.layout().cap, a.threads, all, st.blocks_override(), L.two_hop);
    L.chunk = g.chunk;
    L.steps = g.steps;
    L.per_block = g.per_block;
    a.blocks = g.blocks;
  }
  // Stream ordering across calls on different streams: as allreduce (allreduce.cpp).
  st.launch_in_order(stream, [&] {
    if (algo == CollAlgo::ZeroCopy) coll::zc_collective(st, c.d, a.dtype, a.op, *w, c.src, c.dst, stream);
    else if (algo == CollAlgo::CopyEngine) coll::ce_collective(st, c.d, a.dtype, a.op, c.src, c.dst, stream);
    else coll::launch_collective(L, stream);
  });
}

void run(Communicator& comm, Call& c, void* stream) {
  auto call = detail::services(comm).begin(c.name);  // close() waits for us (in-flight rule)
  if (comm.world_size() == 1) {
    c.d.rank = 0;
    c.d.world = 1;
    return coll::one_rank_collective(detail::services(comm), c.d, c.src, c.dst, stream);
  }
  coll::CollState& st = coll::coll_state(comm);
  auto g = st.lock_calls();
  coll::check_collective_error(st);
  c.d.rank = st.rank();
  c.d.world = st.world();
  size_t zc_bytes = 0;
  const void* zc_buf = coll::zc_buffer(c.d, c.src, c.dst, &zc_bytes);
  const coll::Window* w = coll::zc_kind(c.d.kind) && zc_buf ? st.windows().find(zc_buf, zc_bytes) : nullptr;
  w = coll::graph_window_for(st, c, zc_buf, zc_bytes, w, stream);
  CollAlgo algo = coll::choose_algo(st, c, w);
  // Nothing moves, on any rank (counts are equal everywhere); all_to_all_v always runs (a rank
  // with nothing to move still takes part in the others' steps).
  if (c.d.kind != coll::kAllToAllV && c.d.count == 0) return;
  if (!st.host()) return device_run(st, c, algo, w, stream);
  try {
    if (algo == CollAlgo::ZeroCopy)
      coll::zc_collective(st, c.d, static_cast<int>(c.dtype), static_cast<int>(c.op), *w, c.src, c.dst, nullptr);
    else
      coll::host_collective(st, c.d, static_cast<int>(c.dtype), static_cast<int>(c.op), c.src, c.dst, algo);
  } catch (...) {
    st.set_broken_by_current_exception(c.name);
    throw;
  }
}

Call make(const char* name, int kind, DataType dtype, size_t count) {
  Call c;
  c.name = name;
  c.dtype = dtype;
  c.d.kind = kind;
  c.d.elem = dtype_size(dtype);  // validates dtype
  c.d.count = count;
  mul_checked(name, count, c.d.elem, "count");
  return c;
}

}  // namespace

void all_gather(Communicator& comm, const void* sendbuf, void* recvbuf, size_t count, DataType dtype, void* stream) {
  Call c = make("all_gather", coll::kAllGather, dtype, count);
  const int n = world_of(comm);
  size_t sb = count * c.d.elem, rb = mul_checked(c.name, sb, size_t(n), "recv bytes");
  check_null(c.name, sendbuf, sb, "sendbuf");
  check_null(c.name, recvbuf, rb, "recvbuf");
  check_overlap(c.name, sendbuf, sb, recvbuf, rb, static_cast<char*>(recvbuf) + size_t(comm.rank()) * sb);
  c.src = sendbuf;
  c.dst = recvbuf;
  run(comm, c, stream);
}

void reduce_scatter(Communicator& comm, const void* sendbuf, void* recvbuf, size_t recvcount, DataType dtype,
                    ReduceOp op, void* stream) {
  Call c = make("reduce_scatter", coll::kReduceScatter, dtype, recvcount);
  check_op(c.name, op);
  const int n = world_of(comm);
  size_t rb = recvcount * c.d.elem, sb = mul_checked(c.name, rb, size_t(n), "send bytes");
  check_null(c.name, sendbuf, sb, "sendbuf");
  check_null(c.name, recvbuf, rb, "recvbuf");
  // In place: sendbuf + rank*recvcount == recvbuf, i.e. sendbuf == recvbuf - rank*recvcount.
  const void* in_place = reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(recvbuf) - size_t(comm.rank()) * rb);
  check_overlap(c.name, sendbuf, sb, recvbuf, rb, in_place);
  c.op = op;
  c.src = sendbuf;
  c.dst = recvbuf;
  run(comm, c, stream);
}

void broadcast(Communicator& comm, const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root,
               void* stream) {
  Call c = make("broadcast", coll::kBroadcast, dtype, count);
  check_root(c.name, root, world_of(comm));
  size_t b = count * c.d.elem;
  check_null(c.name, recvbuf, b, "recvbuf");
  if (comm.rank() == root) {
    check_null(c.name, sendbuf, b, "sendbuf (root)");
    check_overlap(c.name, sendbuf, b, recvbuf, b, recvbuf);
  }
  c.d.root = root;
  c.src = sendbuf;
  c.dst = recvbuf;
  run(comm, c, stream);
}

void reduce(Communicator& comm, const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op,
            int root, void* stream) {
  Call c = make("reduce", coll::kReduce, dtype, count);
  check_op(c.name, op);
  check_root(c.name, root, world_of(comm));
  size_t b = count * c.d.elem;
  check_null(c.name, sendbuf, b, "sendbuf");
  if (comm.rank() == root) {
    check_null(c.name, recvbuf, b, "recvbuf (root)");
    check_overlap(c.name, sendbuf, b, recvbuf, b, recvbuf);
  }
  c.op = op;
  c.d.root = root;
  c.src = sendbuf;
  c.dst = recvbuf;
  run(comm, c, stream);
}

void all_to_all(Communicator& comm, const void* sendbuf, void* recvbuf, size_t count_per_peer, DataType dtype,
                void* stream) {
  Call c = make("all_to_all", coll::kAllToAll, dtype, count_per_peer);
  size_t b = mul_checked(c.name, count_per_peer * c.d.elem, size_t(world_of(comm)), "bytes");
  check_null(c.name, sendbuf, b, "sendbuf");
  check_null(c.name, recvbuf, b, "recvbuf");
  // In place: every path reads a range before it writes it (push and copy engines: a chunk is
  // sent before the same chunk arrives; LL: a thread loads its word before it stores the incoming
  // one; zero-copy: swaps).
  check_overlap(c.name, sendbuf, b, recvbuf, b, recvbuf);
  c.src = sendbuf;
  c.dst = recvbuf;
  run(comm, c, stream);
}

void all_to_all_v(Communicator& comm, const void* sendbuf, const size_t* send_counts, const size_t* send_displs,
                  void* recvbuf, const size_t* recv_counts, const size_t* recv_displs, DataType dtype, void* stream) {
  Call c = make("all_to_all_v", coll::kAllToAllV, dtype, 0);
  const int n = world_of(comm), me = comm.rank();
  if (!send_counts || !send_displs || !recv_counts || !recv_displs)
    throw InvalidArgument(common::format(
        "{}: null count/displacement array (send_counts {}, send_displs {}, recv_counts {}, recv_displs {})", c.name,
        static_cast<const void*>(send_counts), static_cast<const void*>(send_displs),
        static_cast<const void*>(recv_counts), static_cast<const void*>(recv_displs)));
  if (n > coll::kMaxRanks)
    throw UnsupportedError(
        common::format("{}: at most {} ranks (one node); this communicator has {}", c.name, coll::kMaxRanks, n));
  const size_t e = c.d.elem;
  size_t s_end = 0, r_end = 0, s_lo = SIZE_MAX, r_lo = SIZE_MAX;  // element extents actually touched
  for (int q = 0; q < n; ++q) {
    for (int k = 0; k < 2; ++k) {
      size_t cnt = k ? recv_counts[q] : send_counts[q], dsp = k ? recv_displs[q] : send_displs[q];
      if (dsp > SIZE_MAX / e - cnt)
        throw InvalidArgument(common::format("{}: {} displacement {} + count {} for rank {} overflows", c.name,
                                             k ? "recv" : "send", dsp, cnt, q));
      if (!cnt) continue;
      (k ? r_end : s_end) = std::max(k ? r_end : s_end, dsp + cnt);
      (k ? r_lo : s_lo) = std::min(k ? r_lo : s_lo, dsp);
    }
    c.d.send_counts[q] = send_counts[q];
    c.d.send_displs[q] = send_displs[q];
    c.d.recv_counts[q] = recv_counts[q];
    c.d.recv_displs[q] = recv_displs[q];
  }
  if (send_counts[me] != recv_counts[me])
    throw InvalidArgument(common::format("{}: rank {} sends itself {} elements but receives {}", c.name, me,
                                         send_counts[me], recv_counts[me]));
  if (s_end) check_null(c.name, sendbuf, s_end * e, "sendbuf");
  if (r_end) check_null(c.name, recvbuf, r_end * e, "recvbuf");
  if (s_end && r_end)
    check_overlap(c.name, static_cast<const char*>(sendbuf) + s_lo * e, (s_end - s_lo) * e,
                  static_cast<char*>(recvbuf) + r_lo * e, (r_end - r_lo) * e, nullptr);
  c.src = sendbuf;
  c.dst = recvbuf;
  run(comm, c, stream);
}

}  // namespace peerlink
