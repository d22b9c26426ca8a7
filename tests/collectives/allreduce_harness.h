// Shared pieces of the allreduce tests: per-rank random inputs (never zero), a float64 / exact
// integer reference computed independently of the library's reduction code, tolerance per dtype,
// and a shared-memory table where ranks leave output hashes so the parent can check that every
// rank got identical bits.
#pragma once
#include <sys/mman.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/reduce_ops.h"
#include "peerlink/collectives.h"
#include "peerlink/options.h"
#include "support/mp.h"

namespace pltest::coll {

using peerlink::DataType;
using peerlink::ReduceOp;
namespace pc = peerlink::coll;

// Options from the environment with the allreduce algorithm forced ("" = auto) and a timeout.
inline peerlink::Options allreduce_opts(const char* algo, int timeout_ms) {
  peerlink::Options o = peerlink::Options::from_env();
  o.allreduce_algo = peerlink::parse_allreduce_algo(algo);
  o.timeout = std::chrono::milliseconds(timeout_ms);
  return o;
}

inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Value of element i of rank r's input for a case, as a double, chosen so that op stays in range:
// sums of mixed signs, products near 1, wide spread for max/min. Never zero.
inline double gen_value(uint64_t seed, int r, size_t i, DataType t, ReduceOp op) {
  uint64_t h = mix(seed * 1000003ULL + uint64_t(r) * 0x10001ULL + i * 0x9E37ULL);
  double u = double(h >> 11) / double(1ULL << 53);
  bool neg = (h & 1) != 0;
  bool integer = t == DataType::I32 || t == DataType::I64;
  if (integer) {
    if (op == ReduceOp::Prod) return double(1 + (h >> 7) % 3) * (neg ? -1 : 1);
    return double(1 + (h >> 7) % 1000000) * (neg ? -1 : 1);
  }
  if (op == ReduceOp::Prod) return 0.75 + 0.5 * u;
  if (op == ReduceOp::Sum || op == ReduceOp::Avg) return (0.25 + u) * (neg ? -1 : 1);
  return (0.25 + u) * 8 * (neg ? -1 : 1);
}

// Stores v into element i of a buffer of dtype t (rounded to the dtype).
inline void store(void* buf, size_t i, DataType t, double v) {
  switch (t) {
    case DataType::F32: static_cast<float*>(buf)[i] = float(v); break;
    case DataType::F64: static_cast<double*>(buf)[i] = v; break;
    case DataType::F16: static_cast<uint16_t*>(buf)[i] = pc::f32_to_f16(float(v)); break;
    case DataType::BF16: static_cast<uint16_t*>(buf)[i] = pc::f32_to_bf16(float(v)); break;
    case DataType::I32: static_cast<int32_t*>(buf)[i] = int32_t(v); break;
    case DataType::I64: static_cast<int64_t*>(buf)[i] = int64_t(v); break;
  }
}
inline double load(const void* buf, size_t i, DataType t) {
  switch (t) {
    case DataType::F32: return static_cast<const float*>(buf)[i];
    case DataType::F64: return static_cast<const double*>(buf)[i];
    case DataType::F16: return pc::f16_to_f32(static_cast<const uint16_t*>(buf)[i]);
    case DataType::BF16: return pc::bf16_to_f32(static_cast<const uint16_t*>(buf)[i]);
    case DataType::I32: return static_cast<const int32_t*>(buf)[i];
    case DataType::I64: return double(static_cast<const int64_t*>(buf)[i]);
  }
  return 0;
}

inline void fill_input(void* buf, size_t count, uint64_t seed, int r, DataType t, ReduceOp op) {
  for (size_t i = 0; i < count; ++i) store(buf, i, t, gen_value(seed, r, i, t, op));
}

inline double eps_of(DataType t) {
  switch (t) {
    case DataType::F32: return 1.2e-7;
    case DataType::F64: return 2.3e-16;
    case DataType::F16: return 9.8e-4;
    case DataType::BF16: return 7.9e-3;
    default: return 0;
  }
}

// Checks out[0..count) against the reference built from every rank's regenerated input.
// Integers: exact with wrap-around. Floats: float64 reference, tolerance scaled by magnitude.
inline void check_result(const void* out, size_t count, uint64_t seed, int world, DataType t, ReduceOp op,
                         const std::string& what) {
  size_t es = peerlink::dtype_size(t);
  std::vector<unsigned char> in(es);
  for (size_t i = 0; i < count; ++i) {
    bool integer = t == DataType::I32 || t == DataType::I64;
    if (integer) {
      uint64_t acc = 0;
      for (int r = 0; r < world; ++r) {
        store(in.data(), 0, t, gen_value(seed, r, i, t, op));
        int64_t x = t == DataType::I32 ? int64_t(*reinterpret_cast<int32_t*>(in.data()))
                                       : *reinterpret_cast<int64_t*>(in.data());
        uint64_t ux = uint64_t(x);
        if (r == 0) acc = ux;
        else if (op == ReduceOp::Sum || op == ReduceOp::Avg) acc += ux;
        else if (op == ReduceOp::Prod) acc *= ux;
        else if (op == ReduceOp::Max) acc = int64_t(ux) > int64_t(acc) ? ux : acc;
        else acc = int64_t(ux) < int64_t(acc) ? ux : acc;
      }
      int64_t got = t == DataType::I32 ? int64_t(static_cast<const int32_t*>(out)[i]) : static_cast<const int64_t*>(out)[i];
      int64_t want = t == DataType::I32 ? int64_t(int32_t(uint32_t(acc))) : int64_t(acc);
      if (op == ReduceOp::Avg) want /= world;  // the wrapped sum, divided toward zero (ncclAvg)
      MP_CHECK_MSG(got == want, what << ": element " << i << " of " << count << " is " << got << ", want " << want);
      continue;
    }
    double acc = 0, mag = 0;
    for (int r = 0; r < world; ++r) {
      store(in.data(), 0, t, gen_value(seed, r, i, t, op));
      double x = load(in.data(), 0, t);
      mag += std::fabs(x);
      if (r == 0) acc = x;
      else if (op == ReduceOp::Sum || op == ReduceOp::Avg) acc += x;
      else if (op == ReduceOp::Prod) acc *= x;
      else if (op == ReduceOp::Max) acc = std::max(acc, x);
      else acc = std::min(acc, x);
    }
    if (op == ReduceOp::Avg) acc /= world;
    double got = load(out, i, t);
    double tol = (op == ReduceOp::Max || op == ReduceOp::Min) ? 0.0
                 : op == ReduceOp::Prod ? eps_of(t) * (world + 1) * std::fabs(acc)
                 : op == ReduceOp::Avg  ? eps_of(t) * (world + 2) * mag / world  // the sum's roundings, then the division's
                                        : eps_of(t) * (world + 1) * mag;
    MP_CHECK_MSG(std::fabs(got - acc) <= tol, what << ": element " << i << " of " << count << " is " << got
                                                   << ", reference " << acc << " (tolerance " << tol << ")");
  }
}

inline uint64_t fnv1a(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  auto c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ULL;
  return h;
}

// Shared (MAP_SHARED, made before fork) table of output hashes: [rank][case].
class HashTable {
 public:
  HashTable(int world, int cases) : world_(world), cases_(cases) {
    bytes_ = sizeof(uint64_t) * size_t(world) * size_t(cases);
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap of the hash table failed");
    table_ = static_cast<uint64_t*>(p);
  }
  ~HashTable() { munmap(table_, bytes_); }
  void put(int rank, int c, uint64_t h) {
    MP_CHECK_MSG(c < cases_, "case index " << c << " >= " << cases_);
    table_[size_t(rank) * cases_ + c] = h;
  }
  // "" when every used case has one non-zero hash on all ranks, else the first disagreement.
  std::string mismatch(int used) const {
    for (int c = 0; c < used; ++c)
      for (int r = 0; r < world_; ++r) {
        uint64_t h0 = table_[c], h = table_[size_t(r) * cases_ + c];
        if (h == 0) return "case " + std::to_string(c) + ": rank " + std::to_string(r) + " left no hash";
        if (h != h0) return "case " + std::to_string(c) + ": rank " + std::to_string(r) + " got different bits than rank 0";
      }
    return "";
  }

 private:
  int world_, cases_;
  size_t bytes_;
  uint64_t* table_;
};

}  // namespace pltest::coll
