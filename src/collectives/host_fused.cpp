// Host backend of the fused allreduce + residual add + RMSNorm: the OneShot and TwoShot data flows
// of fused_kernels.cu (same scratch regions, steps of rows, shards, sequence numbers and flags),
// run by one CPU thread per rank over SHM, so CI exercises them across real processes; and the
// epilogue alone. The element math is fused_math.h's, as on the GPU. A row's sum of squares is
// taken in element order here (the GPU sums per thread, then per warp): results agree with the
// GPU's to an ulp, and bit for bit across the ranks of one communicator.
#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/fused_call.h"
#include "collectives/fused_math.h"
#include "collectives/fused_plan.h"
#include "collectives/host_sync.h"
#include "common/format.h"

namespace peerlink::coll {
namespace {

template <typename T>
class HostRows {
 public:
  explicit HostRows(const FusedCall& c)
      : c_(c), h_(c.hidden), in_(static_cast<const T*>(c.input)), res_(static_cast<const T*>(c.residual_in)),
        w_(static_cast<const T*>(c.weight)), ro_(h_), scale_(c.quant_out ? *c.scale : 1.f) {}

  // ro = round(sum of the ranks' rows in rank order + residual): ins[r] is rank r's row (ours in
  // the input, the peers' in scratch), n ranks.
  void reduce(size_t row, const T* const* ins, int n) {
    const T* r = res_ + row * h_;
    for (size_t e = 0; e < h_; ++e) {
      float acc = Acc<T>::in(ins[0][e]);
      for (int q = 1; q < n; ++q) acc += Acc<T>::in(ins[q][e]);
      ro_[e] = fused_residual<T>(acc, r[e]);
    }
  }
  const T* input_row(size_t row) const { return in_ + row * h_; }
  T* ro() { return ro_.data(); }

  // Every output of `row` from ro (the row's rounded residual_out). ro is a copy, so residual_out
  // and norm_out may be the residual and the input themselves.
  void finish(size_t row) {
    float ss = 0.f;
    for (size_t e = 0; e < h_; ++e) {
      const float q = Acc<T>::in(ro_[e]);
      ss += q * q;
    }
    const float inv = fused_inv_rms(ss, h_, c_.eps);
    std::memcpy(static_cast<T*>(c_.residual_out) + row * h_, ro_.data(), h_ * sizeof(T));
    T* nout = c_.norm_out ? static_cast<T*>(c_.norm_out) + row * h_ : nullptr;
    uint8_t* qout = c_.quant_out ? static_cast<uint8_t*>(c_.quant_out) + row * h_ : nullptr;
    for (size_t e = 0; e < h_; ++e) {
      const T y = fused_norm<T>(ro_[e], w_[e], inv, c_.weight_bias);
      if (nout) nout[e] = y;
      if (qout) qout[e] = fused_quant<T>(y, scale_);
    }
  }

 private:
  const FusedCall& c_;
  const size_t h_;
  const T* in_;
  const T* res_;
  const T* w_;
  std::vector<T> ro_;
  const float scale_;
};

template <typename T>
void run(CollState& st, const FusedCall& c, bool two_shot) {
  const DataLayout& L = st.layout();
  const int me = st.rank(), n = st.world();
  const size_t row_bytes = c.hidden * sizeof(T);
  const size_t per_rank = L.cap / row_bytes;  // rows a region position holds (>= 1: fused.cpp)
  const size_t per_step = two_shot ? per_rank * size_t(n) : per_rank;
  auto region = [&](int owner, bool result, int slot, int from, size_t i) {
    return reinterpret_cast<T*>(st.data(owner) + (result ? L.result(slot, from) : L.input(slot, from)) + i * row_bytes);
  };
  HostRows<T> rows(c);
  const T* ins[kMaxRanks];
  for (size_t s0 = 0; s0 < c.tokens; s0 += per_step) {
    const uint64_t seq = st.next_host_step();
    const int slot = int(seq & 1);
    const size_t len = std::min(per_step, c.tokens - s0);
    if (!two_shot) {
      for (int p = 0; p < n; ++p)
        if (p != me) std::memcpy(region(p, false, slot, me, 0), rows.input_row(s0), len * row_bytes);
      host_signal(st, 0, seq);
      host_wait_all(st, 0, seq, c.name);
      for (size_t i = 0; i < len; ++i) {
        for (int r = 0; r < n; ++r) ins[r] = r == me ? rows.input_row(s0 + i) : region(me, false, slot, r, i);
        rows.reduce(s0 + i, ins, n);
        rows.finish(s0 + i);
      }
      continue;
    }
    for (int p = 0; p < n; ++p) {  // reduce-scatter: our copy of shard p goes to its owner
      if (p == me) continue;
      const RowRange sp = fused_shard(len, n, p);
      if (sp.n) std::memcpy(region(p, false, slot, me, 0), rows.input_row(s0 + sp.lo), sp.n * row_bytes);
    }
    host_signal(st, 0, seq);
    host_wait_all(st, 0, seq, c.name);
    const RowRange sm = fused_shard(len, n, me);
    for (size_t i = 0; i < sm.n; ++i) {  // our shard: reduce, residual, push residual_out, finish
      for (int r = 0; r < n; ++r) ins[r] = r == me ? rows.input_row(s0 + sm.lo + i) : region(me, false, slot, r, i);
      rows.reduce(s0 + sm.lo + i, ins, n);
      for (int p = 0; p < n; ++p)
        if (p != me) std::memcpy(region(p, true, slot, me, i), rows.ro(), row_bytes);
      rows.finish(s0 + sm.lo + i);
    }
    host_signal(st, 1, seq);
    host_wait_all(st, 1, seq, c.name);
    for (int p = 0; p < n; ++p) {  // all-gather: the other shards' residual_out rows
      if (p == me) continue;
      const RowRange sp = fused_shard(len, n, p);
      for (size_t i = 0; i < sp.n; ++i) {
        std::memcpy(rows.ro(), region(me, true, slot, p, i), row_bytes);
        rows.finish(s0 + sp.lo + i);
      }
    }
  }
}

template <typename F>
void with_type_of(const FusedCall& c, F&& f) {
  switch (c.dtype) {
    case kF32: return f(float{});
    case kF16: return f(f16_t{});
    case kBF16: return f(bf16_t{});
  }
  throw InvalidArgument(common::format("{}: unknown dtype code {}", c.name, c.dtype));
}

}  // namespace

void host_fused(CollState& st, const FusedCall& c, bool two_shot) {
  with_type_of(c, [&](auto t) { run<decltype(t)>(st, c, two_shot); });
}

void host_fused_local(const FusedCall& c) {
  with_type_of(c, [&](auto t) {
    using T = decltype(t);
    HostRows<T> rows(c);
    for (size_t row = 0; row < c.tokens; ++row) {
      const T* in = rows.input_row(row);
      rows.reduce(row, &in, 1);
      rows.finish(row);
    }
  });
}

}  // namespace peerlink::coll
