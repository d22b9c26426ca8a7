// Input patterns and exact expected results for the allreduce benchmark. Element i of rank r holds
// a small integer derived from a hash of (i, seed) and r, so that every reduction (sum up to 8 ranks,
// prod of 1s and 2s, max, min) is exactly representable in every type, f16 and bf16 included: a
// check can compare bits, and a misplaced or stale chunk shows (the hash changes with i and seed).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

enum class Dt { F32, F16, BF16, F64, I32, I64 };
enum class Op { Sum, Prod, Max, Min, Avg };

inline size_t dt_size(Dt t) {
  switch (t) {
    case Dt::F16: case Dt::BF16: return 2;
    case Dt::F32: case Dt::I32: return 4;
    default: return 8;
  }
}
inline const char* dt_name(Dt t) {
  static const char* n[] = {"float", "half", "bfloat16", "double", "int32", "int64"};
  return n[static_cast<int>(t)];
}
inline const char* op_name(Op o) {
  static const char* n[] = {"sum", "prod", "max", "min", "avg"};
  return n[static_cast<int>(o)];
}
inline Dt parse_dt(const std::string& s) {
  if (s == "float" || s == "f32" || s == "float32" || s == "fp32") return Dt::F32;
  if (s == "half" || s == "f16" || s == "float16" || s == "fp16") return Dt::F16;
  if (s == "bfloat16" || s == "bf16") return Dt::BF16;
  if (s == "double" || s == "f64" || s == "float64") return Dt::F64;
  if (s == "int32" || s == "int" || s == "i32") return Dt::I32;
  if (s == "int64" || s == "i64") return Dt::I64;
  throw std::invalid_argument("-d '" + s + "' is not float, half, bfloat16, double, int32 or int64");
}
inline Op parse_op(const std::string& s) {
  if (s == "sum") return Op::Sum;
  if (s == "prod" || s == "product") return Op::Prod;
  if (s == "max") return Op::Max;
  if (s == "min") return Op::Min;
  if (s == "avg") return Op::Avg;
  throw std::invalid_argument("-o '" + s + "' is not sum, prod, max, min or avg");
}

// Encodes a small non-negative integer (exact in every type) as one element of `t`.
inline void encode(Dt t, double v, unsigned char* out) {
  float f = static_cast<float>(v);
  uint32_t b;
  std::memcpy(&b, &f, 4);
  switch (t) {
    case Dt::F32: std::memcpy(out, &f, 4); break;
    case Dt::F64: std::memcpy(out, &v, 8); break;
    case Dt::I32: { int32_t x = static_cast<int32_t>(v); std::memcpy(out, &x, 4); break; }
    case Dt::I64: { int64_t x = static_cast<int64_t>(v); std::memcpy(out, &x, 8); break; }
    case Dt::BF16: { uint16_t h = static_cast<uint16_t>(b >> 16); std::memcpy(out, &h, 2); break; }
    case Dt::F16: {
      uint16_t h = 0;
      if (b != 0) {  // normal numbers only: small integers; the low 13 mantissa bits are zero
        int e = static_cast<int>((b >> 23) & 0xff) - 127 + 15;
        h = static_cast<uint16_t>((e << 10) | ((b >> 13) & 0x3ff));
      }
      std::memcpy(out, &h, 2);
      break;
    }
  }
}

// Fibonacci hashing: one multiply per element (the 1 GB checks stay fast) and never periodic in i,
// so a chunk placed at the wrong offset does not match the expected values.
inline uint32_t elem_hash(uint64_t i, uint64_t seed) {
  uint64_t z = (i + seed) * 0x9E3779B97F4A7C15ull;
  return static_cast<uint32_t>(z >> 40);
}
// Rank r's value for hash class k (k = hash % 24 covers the period of the formulas below).
// Avg: rank 0 gives n*b + (n-1)*c, the others n*b - c (b = k % 8 + 1, c = k % 3), so the mean is
// n*b, exact in every type. (NCCL's float avg multiplies each input by 1/n first: exact, and so
// checked exactly, only for a power-of-two n.)
inline double input_value(Op op, int r, uint32_t k, int n) {
  if (op == Op::Prod) return (k + static_cast<uint32_t>(r)) % 3 == 0 ? 2.0 : 1.0;
  if (op == Op::Avg) {
    const double b = k % 8 + 1, c = k % 3;
    return r == 0 ? n * b + (n - 1) * c : n * b - c;
  }
  return static_cast<double>((k + 3u * static_cast<uint32_t>(r)) % 8 + 1);
}

class AllreducePattern {
 public:
  AllreducePattern(Dt t, Op op, int nranks) : t_(t), es_(dt_size(t)) {
    for (uint32_t k = 0; k < 24; ++k) {
      double acc = input_value(op, 0, k, nranks);
      for (int r = 1; r < nranks; ++r) {
        double v = input_value(op, r, k, nranks);
        acc = op == Op::Sum || op == Op::Avg ? acc + v
              : op == Op::Prod              ? acc * v
              : op == Op::Max               ? std::max(acc, v)
                                            : std::min(acc, v);
      }
      if (op == Op::Avg) acc /= nranks;
      encode(t, acc, expected_[k]);
      for (int r = 0; r < nranks && r < 64; ++r) encode(t, input_value(op, r, k, nranks), inputs_[r][k]);
    }
  }
  // Rank r's input for `count` elements under `seed`.
  void fill_input(int r, uint64_t seed, size_t count, unsigned char* out) const {
    switch (es_) {
      case 2: fill_t<uint16_t>(inputs_[r], seed, count, out); break;
      case 4: fill_t<uint32_t>(inputs_[r], seed, count, out); break;
      default: fill_t<uint64_t>(inputs_[r], seed, count, out); break;
    }
  }
  // Number of elements of `got` that differ from the exact reduction.
  uint64_t count_wrong(uint64_t seed, size_t count, const unsigned char* got) const {
    switch (es_) {
      case 2: return wrong_t<uint16_t>(seed, count, got);
      case 4: return wrong_t<uint32_t>(seed, count, got);
      default: return wrong_t<uint64_t>(seed, count, got);
    }
  }

 private:
  // Typed loops: the 1 GB checks of the GPU runs must take seconds, not tens of seconds.
  template <typename U>
  static U load(const unsigned char* p) {
    U u;
    std::memcpy(&u, p, sizeof u);
    return u;
  }
  template <typename U>
  void fill_t(const unsigned char (*table)[8], uint64_t seed, size_t count, unsigned char* out) const {
    U vals[24];
    for (int k = 0; k < 24; ++k) vals[k] = load<U>(table[k]);
    U* o = reinterpret_cast<U*>(out);
    for (size_t i = 0; i < count; ++i) o[i] = vals[elem_hash(i, seed) % 24];
  }
  template <typename U>
  uint64_t wrong_t(uint64_t seed, size_t count, const unsigned char* got) const {
    U vals[24];
    for (int k = 0; k < 24; ++k) vals[k] = load<U>(expected_[k]);
    const U* g = reinterpret_cast<const U*>(got);
    uint64_t bad = 0;
    for (size_t i = 0; i < count; ++i) bad += g[i] != vals[elem_hash(i, seed) % 24];
    return bad;
  }

  Dt t_;
  size_t es_;
  unsigned char expected_[24][8] = {};
  unsigned char inputs_[64][24][8] = {};
};

}  // namespace bench
