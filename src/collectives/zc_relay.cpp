// The relay broadcast's cut and copies (zc_relay.h).
#include "collectives/zc_relay.h"

#include <algorithm>

#include "common/format.h"
#include "common/log.h"

namespace peerlink::coll {

// Chunks of at least 128 KB (a chunk is one block's copy followed by one flag). 4x H200, nccl-tests
// broadcast_perf -g 4 -G 100, out of place us at 16 / 32 / 64 / 128 MB, two runs each:
// 128 KB 78.1 / 135.1 / 243.8 / 463.7, 256 KB 85.2 / 148.1 / 240.1 / 464.0, 1 MB 110.3 /
// 170.6 / 297.4 / 546.0, 4 MB 300.9 / 316.4 / 400.8 / 679.5 (NCCL best 88.7 / 137.1 / 233.4 /
// 422.6). From 64 MB the chunk is part / kRelayMaxChunks (333 KB at 128 MB): smaller ones would need
// more flags than the inbox has slots.
constexpr size_t kRelayChunkMin = size_t(128) << 10;

RelaySplit relay_split(size_t bytes, int world) {
  RelaySplit s;
  const size_t parts = world > 1 ? size_t(world - 1) : 1;
  s.part = std::max<size_t>(16, round_up((bytes + parts - 1) / parts, 16));
  s.chunk = std::max(kRelayChunkMin, round_up((s.part + kRelayMaxChunks - 1) / kRelayMaxChunks, 16));
  return s;
}

std::string relay_plan(const CollDesc& d, const Window& w, const char* src, char* dst, ZcRelayArgs* r) {
  const size_t B = d.count * d.elem, dst_off = size_t(dst - w.base);
  const RelaySplit s = relay_split(B, d.world);
  auto part = [&](int q, size_t* lo) {
    *lo = std::min(B, size_t(q) * s.part);
    return std::min(s.part, B - *lo);
  };
  std::string bad;
  auto target = [&](int p, size_t lo, size_t len) -> char* {  // [lo, +len) of rank p's recvbuf
    const size_t at = dst_off + lo;
    const std::string why = w.outside(p, at, len, "write");
    if (why.empty()) return w.peer_base[p] + at;
    if (bad.empty())
      bad = common::format(
          "zero-copy broadcast (rank {}): {} (recvbuf at offset {} of window {} here); nothing was written", d.rank,
          why, dst_off, w.id);
    return nullptr;
  };
  *r = ZcRelayArgs{};
  r->root = d.root;
  r->is_root = d.rank == d.root;
  r->chunk = s.chunk;
  if (r->is_root) {
    for (int q = 0; q < d.world - 1; ++q) {
      size_t lo;
      const size_t len = part(q, &lo);
      if (!len) continue;
      const int owner = relay_owner(q, d.root);
      r->from[r->n] = src + lo;
      r->to[r->n] = target(owner, lo, len);
      r->to_rank[r->n] = owner;
      r->bytes[r->n++] = len;
    }
    if (src != dst) {
      r->own_from = src;
      r->own_to = dst;
      r->own_bytes = B;
    }
  } else {
    size_t lo;
    const size_t len = part(relay_part(d.rank, d.root), &lo);
    for (int p = 0; p < d.world && len; ++p) {
      if (p == d.rank || p == d.root) continue;
      r->from[r->n] = dst + lo;
      r->to[r->n] = target(p, lo, len);
      r->to_rank[r->n] = p;
      r->bytes[r->n++] = len;
    }
  }
  if (!bad.empty()) *r = ZcRelayArgs{};
  return bad;
}

}  // namespace peerlink::coll
