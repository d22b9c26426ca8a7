// The other collectives through LL128 lines (one step, medium pieces over NVLink; layout.h, line
// format in ll128_device.h): every rank pushes its piece for each peer into that peer's LL128 area
// position [sender], then consumes the pieces it receives from its own area as their lines land:
// a copy to the output (moving kinds) or a reduction in rank order (reducing kinds). As the LL
// kernel (coll_kernels.cu), an empty piece still sends one flag-only token line, so every ordered
// pair exchanges something in every call (the two-slot argument of layout.h).
//
// Group g (4 lines of 120 bytes) of the piece to or from peer q is moved by warp g % warps, for
// sending and receiving alike: in place (all_to_all with sendbuf == recvbuf) the warp that writes
// a range of the output has read the same range of the input for its push before.
#include "collectives/coll_launch.h"
#include "collectives/ll128_device.h"
#include "collectives/reduce_ops.h"
#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::coll {
namespace {

using namespace ll128;

template <typename T, int Op, int Kind>
__global__ void __launch_bounds__(1024) coll_ll128_kernel(CollLaunchArgs c) {
  const LaunchArgs& a = c.a;
  const CollDesc& d = c.d;
  uint64_t seq0;
  if (!kernel_begin(a, seq0)) return;
  const T* src = static_cast<const T*>(a.src);
  T* dst = static_cast<T*>(a.dst);
  const int me = a.rank, n = a.world;
  const DataLayout& L = a.layout;
  const uint64_t seq = seq0 + 1;
  const int slot = int(seq & 1);
  const size_t warps = warp_count(), warp = warp_index();
  auto al8 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7) == 0; };
  // The token of an empty piece: line 0 with no data, written and awaited by lane group 0 of warp 0.
  const bool token_warp = warp == 0;
  const bool token_lanes = lane() < kLineLanes;

  for (int p = 0; p < n; ++p) {  // push
    if (p == me) continue;
    const Piece sp = send_piece(d, p, Kind);
    const size_t bytes = sp.count * sizeof(T);
    char* area = a.data[p] + L.ll128(slot, me);
    if (bytes == 0) {
      if (token_warp && token_lanes) put(area, 0, 0, 0, seq);
      continue;
    }
    const char* s = reinterpret_cast<const char*>(src + sp.src_off);
    const bool al = al8(s);
    const size_t lines = ll128_lines(bytes);
    for (size_t g = warp; g < groups_of(lines); g += warps) {
      const size_t l = line_in(g);
      if (l >= lines) continue;
      uint64_t x0, x1;
      load_words(s, bytes, al, l, x0, x1);
      put(area, l, x0, x1, seq);
    }
  }

  bool ok = true;  // the same on every lane of a warp (take)
  auto token = [&](int r) {
    uint64_t x0 = 0, x1 = 0;
    if (token_warp) ok = ok && take(a, a.data[me] + L.ll128(slot, r), 0, token_lanes, seq, r, x0, x1);
  };
  if (reducing(Kind)) {
    const Piece rp = recv_piece(d, me, Kind);
    const size_t bytes = rp.count * sizeof(T);
    if (bytes == 0) {
      for (int r = 0; r < n; ++r)
        if (r != me) token(r);
    } else {
      const char* own = reinterpret_cast<const char*>(src + rp.src_off);
      char* out = reinterpret_cast<char*>(dst + rp.dst_off);
      const bool al = al8(own) && al8(out);
      const size_t lines = ll128_lines(bytes);
      using AccT = typename Acc<T>::type;
      for (size_t g = warp; g < groups_of(lines) && ok; g += warps) {
        const size_t l = line_in(g);
        const bool active = l < lines;
        AccT acc0[8 / sizeof(T)], acc1[8 / sizeof(T)];
        for (int r = 0; r < n && ok; ++r) {
          uint64_t v0 = 0, v1 = 0;
          if (r == me) load_words(own, bytes, al, active ? l : lines, v0, v1);
          else if (!(ok = take(a, a.data[me] + L.ll128(slot, r), l, active, seq, r, v0, v1))) break;
          fold<T, Op>(acc0, v0, r == 0);
          fold<T, Op>(acc1, v1, r == 0);
        }
        if (ok && active) store_words(out, bytes, al, l, unfold<T, Op>(acc0, n), unfold<T, Op>(acc1, n));
      }
    }
  } else {
    for (int r = 0; r < n && ok; ++r) {
      const MoveTarget t = move_target(d, r, Kind, reinterpret_cast<const char*>(src), reinterpret_cast<char*>(dst));
      if (t.token) token(r);
      if (t.token || t.skip) continue;
      const size_t lines = ll128_lines(t.bytes);
      for (size_t g = warp; g < groups_of(lines) && ok; g += warps) {
        const size_t l = line_in(g);
        const bool active = l < lines;
        uint64_t v0 = 0, v1 = 0;
        if (t.in) load_words(t.in, t.bytes, t.aligned8, active ? l : lines, v0, v1);
        else ok = take(a, a.data[me] + L.ll128(slot, r), l, active, seq, r, v0, v1);
        if (ok && active) store_words(t.out, t.bytes, t.aligned8, l, v0, v1);
      }
    }
  }
  kernel_end(a, seq);  // as the LL kernels: a failed wait has set the abort word already
}

template <typename T, int Op>
void launch_typed(const CollLaunchArgs& c, DevStream st) {
  auto go = [&](auto kernel) { gpu::dev::launch(kernel, unsigned(c.a.blocks), unsigned(c.a.threads), st, c.a.pdl, c); };
  switch (c.d.kind) {
    case kReduceScatter: return go(coll_ll128_kernel<T, Op, kReduceScatter>);
    case kReduce: return go(coll_ll128_kernel<T, Op, kReduce>);
  }
  if constexpr (Op == kOpSum) {  // the kinds that only move data run with kOpSum
    switch (c.d.kind) {
      case kAllGather: return go(coll_ll128_kernel<T, Op, kAllGather>);
      case kBroadcast: return go(coll_ll128_kernel<T, Op, kBroadcast>);
      case kAllToAll: return go(coll_ll128_kernel<T, Op, kAllToAll>);
    }
  }
  throw InvalidArgument(common::format("collective: no LL128 kernel for kind {} with op {}", c.d.kind, Op));
}

}  // namespace

void launch_coll_ll128(const CollLaunchArgs& c, void* stream) {
  DevStream st = static_cast<DevStream>(stream);
  if (c.a.threads % kWarpSize != 0)
    throw InvalidArgument(common::format("collective LL128 launch: {} threads per block is not a multiple of {}",
                                         c.a.threads, kWarpSize));
  bool known_op = true;
  bool known = with_type(c.a.dtype, [&](auto t) {
    using T = decltype(t);
    if (!reducing(c.d.kind)) return launch_typed<T, kOpSum>(c, st);
    known_op = with_op(c.a.op, [&](auto op) { launch_typed<T, decltype(op)::value>(c, st); });
  });
  if (!known || !known_op)
    throw InvalidArgument(common::format("collective: unknown dtype code {} or op code {}", c.a.dtype, c.a.op));
}

}  // namespace peerlink::coll
