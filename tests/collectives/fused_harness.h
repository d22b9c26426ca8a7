// Cases of the fused allreduce + residual add + RMSNorm (peerlink/fused.h) for the host and GPU
// tests: per-rank inputs (never zero), a residual and a weight shared by the ranks, and a reference
// computed here from the regenerated inputs of every rank:
//   residual_out  bitwise equal to round(f32 sum in rank order + residual);
//   norm_out      within 1 ulp (f16, bf16) of residual_out * inv * (weight_bias + weight) taken in
//                 double; f32 within 2e-5 relative (its row sum of squares is an f32 sum whose
//                 order is the implementation's: a few ulps of f32 either way);
//   quant_out     the e4m3 nearest to norm_out / scale (every code enumerated here, ties to the
//                 even code, saturated at 448), byte for byte.
// Every case runs twice (fresh inputs both times) and must give the same bits; its outputs' hash
// goes into a HashTable so that the caller can compare ranks. Buffers come from `Mem`
// (coll_harness.h), so the GPU test runs the same cases on device memory.
#pragma once
#include <cmath>
#include <cstring>
#include <iomanip>
#include <string>
#include <vector>

#include "coll_harness.h"
#include "peerlink/fused.h"

namespace pltest::coll {

struct FusedCase {
  DataType t = DataType::BF16;
  size_t tokens = 1, hidden = 1024;
  float weight_bias = 0.f;
  bool in_place = false;  // norm_out == input, residual_out == residual_in
  bool fp8 = false;       // the FP8 form; its second run passes norm_out null and must give the same quant_out
  uint64_t seed = 1;
  std::string what(int world) const {
    return std::string(peerlink::to_string(t)) + " tokens " + std::to_string(tokens) + " hidden " +
           std::to_string(hidden) + " weight_bias " + std::to_string(int(weight_bias)) + (in_place ? " in place" : "") +
           (fp8 ? " fp8" : "") + " world " + std::to_string(world);
  }
};

constexpr float kFusedEps = 1e-6f;
constexpr float kFusedScale = 0.0125f;  // norm values of a few units reach past 448 and below 2^-6

inline double fused_gen(uint64_t seed, int who, size_t i, double lo, double span) {
  const uint64_t h = mix(seed * 1000003ULL + uint64_t(who + 7) * 0x10001ULL + i * 0x9E37ULL);
  const double u = double(h >> 11) / double(1ULL << 53);
  return (lo + span * u) * ((h & 1) ? -1 : 1);
}
// Rank r's input (who = r), the residual (who = -1), the weight (who = -2).
inline std::vector<unsigned char> fused_values(DataType t, size_t count, uint64_t seed, int who) {
  std::vector<unsigned char> v(count * peerlink::dtype_size(t));
  const double lo = who == -2 ? 0.05 : who == -1 ? 0.5 : 0.25, span = who == -1 ? 2.0 : 1.0;
  for (size_t i = 0; i < count; ++i) store(v.data(), i, t, fused_gen(seed, who, i, lo, span));
  return v;
}

// One unit in the last place of type t at the magnitude of x.
inline double ulp_of(DataType t, double x) {
  const int mant = t == DataType::BF16 ? 7 : t == DataType::F16 ? 10 : 23;
  const int emin = t == DataType::F16 ? -14 : -126;
  int e = 0;
  std::frexp(std::fabs(x), &e);
  return std::ldexp(1.0, std::max(e - 1, emin) - mant);
}

// The e4m3 ("fn") code nearest to v: every finite code enumerated, ties to the even code, |v| >= 448
// saturated, NaN 0x7f; the sign kept (NaN's too, and results that round to zero).
inline double e4m3_value(int code) {
  const int e = (code >> 3) & 15, m = code & 7;
  return e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
}
inline uint8_t e4m3_reference(float v) {
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  if (std::isnan(v)) return uint8_t(sign | 0x7f);
  const double a = std::fabs(double(v));
  if (a >= 448.0) return uint8_t(sign | 0x7e);
  int best = 0;
  for (int c = 1; c <= 0x7e; ++c) {
    const double d = std::fabs(e4m3_value(c) - a), db = std::fabs(e4m3_value(best) - a);
    if (d < db || (d == db && (c & 1) == 0)) best = c;
  }
  return uint8_t(sign | best);
}

// Checks one run's outputs against the reference; throws (MP_CHECK) naming the element.
inline void check_fused(const FusedCase& c, int world, const std::vector<unsigned char>& norm,
                        const std::vector<unsigned char>& rout, const std::vector<unsigned char>& quant,
                        const std::string& what) {
  const DataType t = c.t;
  const size_t h = c.hidden, es = peerlink::dtype_size(t);
  std::vector<std::vector<unsigned char>> ins;
  for (int r = 0; r < world; ++r) ins.push_back(fused_values(t, c.tokens * h, c.seed, r));
  const auto res = fused_values(t, c.tokens * h, c.seed, -1), w = fused_values(t, h, c.seed, -2);
  std::vector<unsigned char> ro(es);
  std::vector<double> rov(h);
  for (size_t row = 0; row < c.tokens; ++row) {
    double ss = 0;
    for (size_t e = 0; e < h; ++e) {
      const size_t i = row * h + e;
      float acc = float(load(ins[0].data(), i, t));
      for (int r = 1; r < world; ++r) acc += float(load(ins[r].data(), i, t));
      store(ro.data(), 0, t, double(acc + float(load(res.data(), i, t))));
      MP_CHECK_MSG(std::memcmp(ro.data(), rout.data() + i * es, es) == 0,
                   std::setprecision(9) << what << ": residual_out[" << row << "][" << e << "] is " << load(rout.data(), i, t) << ", want "
                        << load(ro.data(), 0, t));
      rov[e] = load(ro.data(), 0, t);
      ss += rov[e] * rov[e];
    }
    const double inv = 1.0 / std::sqrt(ss / double(h) + double(kFusedEps));
    for (size_t e = 0; e < h; ++e) {
      const size_t i = row * h + e;
      const double exact = rov[e] * inv * (double(c.weight_bias) + load(w.data(), e, t));
      const double got = load(norm.data(), i, t);
      const double tol = t == DataType::F32 ? 2e-5 * std::fabs(exact) + 1e-30 : ulp_of(t, exact);
      MP_CHECK_MSG(std::fabs(got - exact) <= tol, std::setprecision(9) << what << ": norm_out[" << row << "][" << e << "] is " << got
                                                       << ", reference " << exact << " (tolerance " << tol << ")");
      if (c.fp8) {
        const uint8_t want = e4m3_reference(float(got) / kFusedScale);
        MP_CHECK_MSG(quant[i] == want, what << ": quant_out[" << row << "][" << e << "] is 0x" << std::hex
                                            << int(quant[i]) << ", want 0x" << int(want) << std::dec << " (norm "
                                            << got << ")");
      }
    }
  }
}

// Runs case c on comm twice and checks it; the hash of its outputs (the same on every rank).
inline uint64_t run_fused_case(peerlink::Communicator& comm, Mem& mem, const FusedCase& c) {
  const int world = comm.world_size(), me = comm.rank();
  const size_t count = c.tokens * c.hidden, bytes = count * peerlink::dtype_size(c.t);
  const std::string what = c.what(world);
  const auto in = fused_values(c.t, count, c.seed, me), res = fused_values(c.t, count, c.seed, -1);
  const auto w = fused_values(c.t, c.hidden, c.seed, -2);
  Buf bin(mem, bytes, 0x11), bres(mem, bytes, 0x22), bw(mem, w.size(), 0x33), bnorm(mem, bytes, 0xEE),
      brout(mem, bytes, 0xEE), bq(mem, count, 0xEE), bscale(mem, sizeof(float), 0);
  mem.put(bw.p, w.data(), w.size());
  mem.put(bscale.p, &kFusedScale, sizeof(float));
  std::vector<unsigned char> first;
  for (int run = 0; run < 2; ++run) {
    mem.put(bin.p, in.data(), bytes);
    mem.put(bres.p, res.data(), bytes);
    void* norm = c.in_place ? bin.p : bnorm.p;
    void* rout = c.in_place ? bres.p : brout.p;
    if (c.fp8)
      peerlink::allreduce_add_rmsnorm_fp8(comm, bin.p, bres.p, bw.p, run == 1 ? nullptr : norm, rout, bq.p,
                                          static_cast<const float*>(bscale.p), c.tokens, c.hidden, c.t, kFusedEps,
                                          c.weight_bias, mem.stream);
    else
      peerlink::allreduce_add_rmsnorm(comm, bin.p, bres.p, bw.p, norm, rout, c.tokens, c.hidden, c.t, kFusedEps,
                                      c.weight_bias, mem.stream);
    mem.sync();
    auto gn = (c.in_place ? bin : bnorm).read(), gr = (c.in_place ? bres : brout).read(), gq = bq.read();
    for (size_t i = bytes; i < gr.size(); ++i)
      MP_CHECK_MSG(gr[i] == (c.in_place ? 0x22 : 0xEE), what << ": byte " << i << " past residual_out was written");
    for (size_t i = count; i < gq.size(); ++i) MP_CHECK_MSG(gq[i] == 0xEE, what << ": byte past quant_out written");
    if (run == 0) {
      for (size_t i = bytes; i < gn.size(); ++i)
        MP_CHECK_MSG(gn[i] == (c.in_place ? 0x11 : 0xEE), what << ": byte " << i << " past norm_out was written");
      check_fused(c, world, gn, gr, gq, what);
      first = gn;
      first.resize(bytes);
      first.insert(first.end(), gr.begin(), gr.begin() + long(bytes));
      if (c.fp8) first.insert(first.end(), gq.begin(), gq.begin() + long(count));
      continue;
    }
    // The second run: the same bits. The FP8 form ran without norm_out: bnorm still holds the first
    // run's norm, and in place the input is as it was put.
    const bool norm_kept = c.fp8 && c.in_place;
    MP_CHECK_MSG(std::memcmp(gn.data(), norm_kept ? in.data() : first.data(), bytes) == 0,
                 what << (c.fp8 ? ": norm_out was null, yet it was written" : ": the second run's norm_out differs"));
    MP_CHECK_MSG(std::memcmp(gr.data(), first.data() + bytes, bytes) == 0, what << ": the second run's residual_out differs");
    if (c.fp8)
      MP_CHECK_MSG(std::memcmp(gq.data(), first.data() + 2 * bytes, count) == 0,
                   what << ": the second run's quant_out (norm_out null) differs");
  }
  return fnv1a(first.data(), first.size()) | 1;
}

}  // namespace pltest::coll
